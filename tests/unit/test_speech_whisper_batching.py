"""Cross-request batching of Whisper windows: the batcher's grouping (no model), then the recognizer's batched
path on the real Whisper base model with concurrent callers (no Ray)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from contracts.settings import Settings
from engines.speech.audio import SAMPLE_RATE
from engines.speech.vad import speech_chunks
from engines.speech.whisper.batching import WindowBatcher
from engines.speech.whisper.recognizer import WhisperRecognizer, split_long_chunks
from engines.speech.whisper.weights import ensure_whisper_base
from scripts.eval_wer import word_errors
from tests.speechdata import silence, speech_16k


class WindowEcho:
    """A decoder that answers each window with its own metadata, remembering the batches it was given."""

    def __init__(self, delay_s: float = 0.0, fail_on: str | None = None) -> None:
        self.batches: list[tuple[Hashable, list[str]]] = []
        self.delay_s = delay_s
        self.fail_on = fail_on

    def __call__(self, key: Hashable, features: np.ndarray, metadata: list[dict[str, Any]]) -> list[list[dict]]:
        names = [m["name"] for m in metadata]
        self.batches.append((key, names))
        assert features.shape[0] == len(metadata)
        assert [float(f[0, 0]) for f in features] == [m["value"] for m in metadata]  # rows stay with their windows
        time.sleep(self.delay_s)
        if self.fail_on in names:
            raise ValueError(f"cannot decode {self.fail_on}")
        return [[{"name": m["name"]}] for m in metadata]


def windows(caller: str, count: int, base: float) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    features = [np.full((2, 3), base + i, dtype=np.float32) for i in range(count)]
    return features, [{"name": f"{caller}{i}", "value": base + i} for i in range(count)]


def call_together(batcher: WindowBatcher, calls: list[tuple[str, str, int]]) -> dict[str, Any]:
    """Every (caller, key, windows) at once; each caller's answer or error by name."""
    start = threading.Barrier(len(calls))

    def one(index: int, call: tuple[str, str, int]) -> Any:
        caller, key, count = call
        features, metadata = windows(caller, count, base=100.0 * index)
        start.wait()
        try:
            return [part[0]["name"] for part in batcher.decode(key, features, metadata)]
        except ValueError as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(one, range(len(calls)), calls))
    return {call[0]: answer for call, answer in zip(calls, answers)}


def test_concurrent_callers_with_one_key_share_a_batch_and_get_their_own_windows_back() -> None:
    decoder = WindowEcho()
    batcher = WindowBatcher(decoder, batch_size=6, wait_s=2.0)
    try:
        answers = call_together(batcher, [("a", "eng", 2), ("b", "eng", 2), ("c", "eng", 2)])
    finally:
        batcher.close()
    assert answers == {"a": ["a0", "a1"], "b": ["b0", "b1"], "c": ["c0", "c1"]}
    assert len(decoder.batches) == 1 and sorted(decoder.batches[0][1]) == ["a0", "a1", "b0", "b1", "c0", "c1"]


def test_batches_hold_one_key_and_at_most_batch_size_windows() -> None:
    decoder = WindowEcho(delay_s=0.05)
    batcher = WindowBatcher(decoder, batch_size=3, wait_s=0.5)
    try:
        calls = [("e", "eng", 2), ("f", "fra", 1), ("g", "eng", 2), ("h", "eng", 7)]
        answers = call_together(batcher, calls)
    finally:
        batcher.close()
    assert answers == {name: [f"{name}{i}" for i in range(count)] for name, _, count in calls}
    keys_of = {name: key for name, key, _ in calls}
    for key, names in decoder.batches:
        assert len(names) <= 3
        assert {keys_of[name[0]] for name in names} == {key}  # never a French window in an English batch
    decoded = sorted(name for _, names in decoder.batches for name in names)
    assert decoded == sorted(f"{name}{i}" for name, _, count in calls for i in range(count))  # each window once


def test_a_failed_batch_fails_its_callers_only_and_the_batcher_goes_on() -> None:
    decoder = WindowEcho(fail_on="bad0")
    batcher = WindowBatcher(decoder, batch_size=4, wait_s=0.0)
    try:
        failed = batcher.decode("eng", *windows("bad", 1, base=1.0))
    except ValueError as exc:
        failed = exc
    try:
        after = batcher.decode("eng", *windows("ok", 2, base=5.0))
    finally:
        batcher.close()
    assert isinstance(failed, ValueError) and "bad0" in str(failed)
    assert [part[0]["name"] for part in after] == ["ok0", "ok1"]


def test_long_speech_chunks_are_cut_to_fit_a_window() -> None:
    window = 30 * SAMPLE_RATE
    chunks = [{"start": 0, "end": 10 * SAMPLE_RATE}, {"start": 20 * SAMPLE_RATE, "end": 95 * SAMPLE_RATE}]
    cut = split_long_chunks(chunks, window)
    assert cut[0] == chunks[0]
    assert all(c["end"] - c["start"] <= window for c in cut)
    assert cut[1]["start"] == chunks[1]["start"] and cut[-1]["end"] == chunks[1]["end"]
    assert all(a["end"] == b["start"] for a, b in zip(cut[1:], cut[2:]))  # no sample lost or repeated
    assert len(cut) == 4  # 75 s in three equal parts


# ------------------------------------------------------------------------------------------ real Whisper

SENTENCES = [
    "Please call me back when you have finished reading the report.",
    "We need to buy bread, milk and eggs from the shop.",
    "The train to Pretoria leaves from platform number four.",
    "Our office is closed on public holidays and on Sundays.",
]


def test_concurrent_transcriptions_are_decoded_in_one_batch_with_their_own_words(
    settings: Settings, tmp_path: Path
) -> None:
    model = ensure_whisper_base(settings.data_dir)
    recognizer = WhisperRecognizer(model, batch_size=4, batch_wait_s=3.0)
    audios = [
        np.concatenate([silence(1.0 + i * 0.5), speech_16k(text, tmp_path, f"s{i}"), silence(0.5)])
        for i, text in enumerate(SENTENCES)
    ]
    route = recognizer.route("eng")
    recognizer.model(route.model_key)  # loaded before the callers start, so they arrive together
    start = threading.Barrier(len(audios))

    def transcribe(audio: np.ndarray) -> list[Any]:
        chunks = speech_chunks(audio)
        start.wait()
        return list(recognizer.transcribe(audio, route, chunks, offset=7.0))

    try:
        with ThreadPoolExecutor(len(audios)) as pool:
            results = list(pool.map(transcribe, audios))
        assert recognizer._batcher is not None and max(recognizer._batcher.batches) >= 2
    finally:
        recognizer.close()
    for text, audio, segments in zip(SENTENCES, audios, results):
        heard = " ".join(s.text for s in segments)
        errors, words = word_errors(text, heard)
        assert errors / words <= 0.25, (text, heard)  # each caller got its own transcript
        times = [(w.start, w.end) for s in segments for w in s.words]
        assert times and all(s <= e for s, e in times)
        assert all(a[0] <= b[0] for a, b in zip(times, times[1:]))
        leading = 1.0 + SENTENCES.index(text) * 0.5
        assert times[0][0] >= 7.0 + leading - 0.4  # times mapped back past the silence, from the offset
        assert times[-1][1] <= 7.0 + audio.size / SAMPLE_RATE + 0.05


def test_batch_size_zero_batches_on_a_gpu_only_and_a_set_size_wins(settings: Settings) -> None:
    from engines.speech.whisper.placement import GPU_BATCH_SIZE, batch_size, build_recognizer, decode_placement

    assert batch_size(0, "cpu") == 1 and batch_size(0, "cuda") == GPU_BATCH_SIZE
    assert batch_size(4, "cpu") == 4 and batch_size(1, "cuda") == 1
    batched = build_recognizer(settings.speech.whisper.model_copy(update={"batch_size": 4}), settings.data_dir)
    alone = build_recognizer(settings.speech.whisper, settings.data_dir)  # the default, on this CPU machine
    try:
        assert batched._batcher is not None and batched._batcher.batch_size == 4
        assert alone._batcher is None and not alone.batching and batched.batching
    finally:
        batched.close()
    # the sampling fallback is per window: with it on, windows are decoded alone whatever the batch size
    sampling = settings.speech.whisper.model_copy(update={"batch_size": 4, "temperature_fallback": True})
    sampled = build_recognizer(sampling, settings.data_dir)
    assert not sampled.batching
    # so its decodes run side by side as without a batch size
    assert sampled.parallel_decodes == decode_placement(settings.speech.whisper, 1)[0]


def test_decode_placement_runs_one_decode_per_core_on_cpu_without_batches() -> None:
    from contracts.settings import SpeechSettings
    from engines.speech.whisper.placement import MAX_AUTO_PARALLEL_DECODES, decode_placement

    cpu = SpeechSettings(whisper_device="cpu").whisper
    assert decode_placement(cpu, batch=1, cores=2) == (2, 1)  # (decodes at once, threads each)
    assert decode_placement(cpu, batch=1, cores=64) == (MAX_AUTO_PARALLEL_DECODES, 8)  # each its share of the cores
    assert decode_placement(cpu, batch=1, cores=1) == (1, 1)
    assert decode_placement(cpu, batch=8, cores=2) == (1, 2)  # batches: one at a time, on every core
    assert decode_placement(SpeechSettings(whisper_device="cuda").whisper, batch=1, cores=16) == (1, 16)
    assert decode_placement(cpu.model_copy(update={"parallel_decodes": 3}), batch=1, cores=2) == (3, 1)
    assert decode_placement(cpu.model_copy(update={"parallel_decodes": 4}), batch=1, cores=16) == (4, 4)
    assert decode_placement(cpu.model_copy(update={"cpu_threads": 2}), batch=1, cores=4) == (4, 2)
    assert decode_placement(cpu.model_copy(update={"parallel_decodes": 1}), batch=1, cores=4) == (1, 4)


def test_live_placement_gives_live_steps_their_own_threads_only_when_asked() -> None:
    from contracts.settings import SpeechSettings
    from engines.speech.whisper.placement import live_placement

    cpu = SpeechSettings(whisper_device="cpu").whisper
    assert live_placement(cpu, cores=2) == (0, 0)  # the default: live steps share the files' instance
    assert live_placement(cpu.model_copy(update={"live_cpu_threads": 1}), cores=2) == (2, 1)  # (decodes, threads)
    assert live_placement(cpu.model_copy(update={"live_cpu_threads": 2}), cores=8) == (4, 2)
    gpu = SpeechSettings(whisper_device="cuda", whisper_live_cpu_threads=1).whisper
    assert live_placement(gpu, cores=8) == (0, 0)  # a GPU: shared


def test_live_steps_decode_on_a_second_instance_with_their_own_threads(settings: Settings, tmp_path: Path) -> None:
    """``speech.whisper_live_cpu_threads`` other than the files' ``cpu_threads``: a live stream's steps (partials and
    committed segments) run on a second instance of the weights, with its own decodes at once, and give the text
    the files' instance gives; without it, they share the files' instance."""
    from engines.speech.whisper.placement import build_recognizer

    files_two = settings.speech.whisper.model_copy(update={"parallel_decodes": 2, "cpu_threads": 2})
    shared = build_recognizer(files_two, settings.data_dir)
    own = build_recognizer(files_two.model_copy(update={"live_cpu_threads": 1}), settings.data_dir)
    route = own.route("eng")
    assert shared.live_model(route.model_key) is shared.model(route.model_key)
    live = own.live_model(route.model_key)
    assert live is not own.model(route.model_key) and live is own.live_model(route.model_key)
    assert (own.live_threads, own.cpu_threads) == (1, 2) and live.model.num_workers == own.live_decodes >= 1
    audio = speech_16k(SENTENCES[0], tmp_path, "live")
    chunks = speech_chunks(audio)
    texts = {
        name: (
            [s.text for s in r.exact_segments(audio, route, chunks).segments],
            [s.text for s in r.quick_segments(audio, route, chunks).segments],
        )
        for name, r in (("shared", shared), ("own", own))
    }
    assert texts["own"] == texts["shared"] and texts["own"][0] and texts["own"][1]


def test_concurrent_transcriptions_decode_side_by_side_with_the_same_words(settings: Settings, tmp_path: Path) -> None:
    """Two decodes of one model side by side (CTranslate2 workers; the gain is measured in
    scripts/bench/bench_transcription.py): callers that reach it together each get exactly the transcript that a
    model decoding one at a time, on as many threads, gives the same audio. And the default placement is what loads."""
    from engines.speech.whisper.placement import build_recognizer, decode_placement

    two = settings.speech.whisper.model_copy(update={"parallel_decodes": 2, "cpu_threads": 2})
    side_by_side = build_recognizer(two, settings.data_dir)
    one_at_a_time = build_recognizer(two.model_copy(update={"parallel_decodes": 1}), settings.data_dir)
    audios = [speech_16k(" ".join(SENTENCES[i : i + 2]), tmp_path, f"p{i}") for i in (0, 2)]
    route = side_by_side.route("eng")
    assert side_by_side.model(route.model_key).model.num_workers == 2
    assert one_at_a_time.model(route.model_key).model.num_workers == 1
    default = build_recognizer(settings.speech.whisper, settings.data_dir)
    decodes, threads = decode_placement(settings.speech.whisper, 1)
    assert default.model(route.model_key).model.num_workers == decodes and default.cpu_threads == threads
    start = threading.Barrier(len(audios), timeout=120)

    def words(
        recognizer: WhisperRecognizer, audio: np.ndarray, together: bool = False
    ) -> list[tuple[str, float, float]]:
        chunks = speech_chunks(audio)
        if together:
            start.wait()  # both callers reach the model at the same moment
        return [(w.word, w.start, w.end) for s in recognizer.transcribe(audio, route, chunks) for w in s.words]

    with ThreadPoolExecutor(len(audios)) as pool:
        together = list(pool.map(lambda audio: words(side_by_side, audio, together=True), audios))
    assert all(together)
    assert together == [words(one_at_a_time, audio) for audio in audios]


def test_batch_tasks_decode_one_file_at_a_time_on_their_share_of_the_cores(settings: Settings) -> None:
    from cluster.batch import BatchCoordinator
    from persistence.session import Database

    def task(changes: dict[str, Any]) -> Settings:
        coordinator = BatchCoordinator(settings.updated(changes), Database(settings.db_url), use_ray=False)
        return Settings.from_bound(coordinator.task_settings)

    alone = task({"batch": {"max_parallel": 1}})
    assert alone.speech.whisper_parallel_decodes == 1 and alone.speech.whisper_cpu_threads == (os.cpu_count() or 1)
    # the Speech replicas' placement (the cluster profile's) does not reach the tasks; their CPUs decide
    cluster = task({"batch": {"task_cpus": 1}, "speech": {"whisper_parallel_decodes": 2, "whisper_cpu_threads": 2}})
    assert cluster.speech.whisper_parallel_decodes == 1 and cluster.speech.whisper_cpu_threads == 1
    assert (
        task({"speech": {"whisper_cpu_threads": 3}}).speech.whisper_cpu_threads == 3
    )  # without task CPUs, the setting

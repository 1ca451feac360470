"""How Whisper's decodes use the machine, and the recognizer built with that placement: batches on a GPU (where they
pay), decodes side by side on CPU cores (one per core, each on its share of the threads), and a second instance
for live steps where ``speech.whisper_live_cpu_threads`` asks for one. The figures behind these choices are in
docs/speech.md (batching, decodes side by side) and docs/performance.md."""

from __future__ import annotations

import os
from pathlib import Path

from contracts.settings import WhisperSettings
from engines.speech.whisper.recognizer import WhisperRecognizer

BASE_MODEL_NAME = "whisper-base"  # what the records and /api/v1/models call the default model


GPU_BATCH_SIZE = 4  # the best batch of Whisper base on an H100 (beam search, word times): docs/speech.md


def _on_gpu(device: str) -> bool:
    if device == "auto":
        import ctranslate2

        return ctranslate2.get_cuda_device_count() > 0
    return device == "cuda"


def batch_size(setting: int, device: str) -> int:
    """``speech.whisper_batch_size``, with 0 resolved: batches on a GPU, where they pay; one window at a time on CPU."""
    if setting:
        return setting
    return GPU_BATCH_SIZE if _on_gpu(device) else 1


MAX_AUTO_PARALLEL_DECODES = 8  # a decode holds its window's activations: bounded on a node with many cores


def _usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def decode_placement(whisper: WhisperSettings, batch: int, cores: int | None = None) -> tuple[int, int]:
    """``(parallel decodes, threads per decode)`` for ``speech.whisper_parallel_decodes`` and
    ``speech.whisper_cpu_threads``, 0 resolved. Batches (``batch`` > 1) or a GPU: one decode at a time on every
    core. On CPU otherwise, one decode per core (at most :data:`MAX_AUTO_PARALLEL_DECODES`), each on its share of
    the cores: a second thread speeds a decode's encoder but slows its decoder steps (libgomp wakes it for every
    small matrix product), and a live stream's steps are mostly decoder (docs/speech.md#decodes-side-by-side)."""
    cores = cores or _usable_cores()
    alone_on_cpu = batch <= 1 and not _on_gpu(whisper.device)
    automatic = min(cores, MAX_AUTO_PARALLEL_DECODES) if alone_on_cpu else 1
    decodes = whisper.parallel_decodes or automatic
    threads = whisper.cpu_threads or max(1, cores // decodes)
    return decodes, threads


def live_placement(whisper: WhisperSettings, cores: int | None = None) -> tuple[int, int]:
    """``(decodes at once, threads per decode)`` of a live stream's steps (``speech.whisper_live_cpu_threads``): one
    decode per that many cores (at most :data:`MAX_AUTO_PARALLEL_DECODES`); ``(0, 0)`` where the steps share the
    files' instance (the setting 0, or a GPU)."""
    threads = whisper.live_cpu_threads
    if threads <= 0 or _on_gpu(whisper.device):
        return 0, 0
    cores = cores or _usable_cores()
    return min(MAX_AUTO_PARALLEL_DECODES, max(1, cores // threads)), threads


def build_recognizer(whisper: WhisperSettings, data_dir: Path) -> WhisperRecognizer:
    from engines.speech.whisper.weights import ensure_whisper_base

    model = whisper.model or ensure_whisper_base(data_dir)
    batch = batch_size(whisper.batch_size, whisper.device)
    # the sampling fallback decodes every window alone, whatever the batch size (engines/speech/whisper/recognizer.py)
    decodes, threads = decode_placement(whisper, 1 if whisper.temperature_fallback else batch)
    live_decodes, live_threads = live_placement(whisper)
    return WhisperRecognizer(
        model,
        whisper.language_models,
        default_model_name=whisper.model or BASE_MODEL_NAME,
        offline_base=not whisper.model,
        device=whisper.device,
        compute_type=whisper.compute_type,
        cpu_threads=threads,
        parallel_decodes=decodes,
        beam_size=whisper.beam_size,
        temperature_fallback=whisper.temperature_fallback,
        seed=whisper.seed,
        batch_size=batch,
        batch_wait_s=whisper.batch_wait_ms / 1000,
        live_threads=live_threads,
        live_decodes=live_decodes,
    )

"""Speech recognition engine and pipeline on the real Whisper base model (espeak-ng speech made in the test).

Whisper base on 2 CPU cores takes a few seconds per clip: the clips are short and few.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np
import pytest

from contracts.errors import InvalidInput, LanguageNotServed, TimedOut, Unavailable
from contracts.settings import Settings
from contracts.speech import TranscriptionResult, build_record
from engines.speech import screening
from engines.speech.audio import SAMPLE_RATE
from engines.speech.pipeline import TranscriptionPipeline, get_pipeline
from engines.speech.routing import SETTING as SPEECH_SETTING
from engines.speech.vad import speech_chunks
from engines.speech.whisper import weights as whisper_weights
from engines.speech.whisper.languages import SETTING
from engines.speech.whisper.recognizer import WhisperRecognizer
from engines.speech.windows import silence_cut, windows
from scripts.eval_wer import word_errors
from tests.speechdata import silence, speech_16k, tone_music, write_audio

SENTENCES = [
    "Please call me back when you have finished reading the report.",
    "We need to buy bread, milk and eggs from the shop.",
    "The children are playing football in the park after school.",
    "My account number was sent to you by email last week.",
    "The meeting will start at nine o'clock tomorrow morning.",
    "Thank you for calling, your payment has been received.",
    "The train to Pretoria leaves from platform number four.",
    "Our office is closed on public holidays and on Sundays.",
]


@pytest.fixture(scope="module")
def pipeline(settings: Settings) -> TranscriptionPipeline:
    return get_pipeline(settings.speech, settings.data_dir)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    folder = tmp_path_factory.mktemp("speech")
    return {f"s{i}": speech_16k(text, folder, f"s{i}") for i, text in enumerate(SENTENCES)}


def _wav(folder: Path, name: str, audio: np.ndarray) -> Path:
    return write_audio(audio, SAMPLE_RATE, folder / f"{name}.wav")


def _record(result: TranscriptionResult) -> dict:
    """The wire record of a result, as the sync route answers it."""
    return build_record(
        result, id="test", customer_id=1, project_id=None, keychain_id=None, blob_name="test"
    ).model_dump(mode="json")


# ------------------------------------------------------------------------------------------ model weights


def test_whisper_base_is_joined_verified_and_cached_once(tmp_path: Path) -> None:
    target = whisper_weights.ensure_whisper_base(tmp_path)
    model = target / "model.bin"
    assert model.stat().st_size == whisper_weights.MODEL_SIZE
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert digest == whisper_weights.MODEL_SHA256
    assert {p.name for p in target.iterdir()} >= {"config.json", "tokenizer.json", "vocabulary.txt", "model.bin"}
    mtime = model.stat().st_mtime_ns
    assert whisper_weights.ensure_whisper_base(tmp_path) == target
    assert model.stat().st_mtime_ns == mtime  # not rewritten
    assert [p.name for p in target.parent.iterdir()] == ["whisper-base"]  # no temporary folders left

    with model.open("r+b") as f:  # a damaged cache is rebuilt
        f.truncate(1000)
    whisper_weights.ensure_whisper_base(tmp_path)
    assert model.stat().st_size == whisper_weights.MODEL_SIZE


def test_parts_that_do_not_match_the_pinned_hash_are_refused(tmp_path: Path, monkeypatch) -> None:
    fake = []
    for i in (1, 2):
        d = tmp_path / f"part{i}"
        d.mkdir()
        (d / f"model.bin.part{i}").write_bytes(os.urandom(1024))
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            (d / name).write_text("{}")
        fake.append(d)
    monkeypatch.setattr(whisper_weights, "package_data_dirs", lambda: fake)
    with pytest.raises(Unavailable, match="corrupt"):
        whisper_weights.ensure_whisper_base(tmp_path / "data")
    assert not (tmp_path / "data" / "models" / "whisper-base").exists()
    assert list((tmp_path / "data" / "models").iterdir()) == []


# ------------------------------------------------------------------------------------------ languages


def test_language_routes_are_honest() -> None:
    recognizer = WhisperRecognizer("whisper-base-dir")
    assert recognizer.route("eng").language_token == "en"
    assert recognizer.route("AF").code == "afr"  # aliases and case
    assert recognizer.route("fra").model_key == "default"
    assert set(recognizer.detector.detectable().values()) == {"afr", "eng", "fra"}
    for code in ("zul", "sot", "cs-zul"):
        with pytest.raises(InvalidInput) as info:
            recognizer.route(code)
        assert SETTING in info.value.detail and "no speech model" in info.value.detail
    with pytest.raises(InvalidInput, match="Accepted codes"):
        recognizer.route("klingon")


def test_configured_languages_route_to_their_models() -> None:
    recognizer = WhisperRecognizer("base", {"zul": "/models/zu", "sot": "/models/st"})
    zul = recognizer.route("zul")
    assert (zul.model_key, zul.model_ref, zul.language_token) == ("zul", "/models/zu", None)
    assert recognizer.route("cs-zul").model_ref == "/models/zu"  # code-switched isiZulu uses the isiZulu model
    assert recognizer.route("sot").model_ref == "/models/st"
    assert "zul" not in recognizer.detector.detectable().values()  # Whisper has no isiZulu token to detect


def test_missing_configured_model_is_503_naming_the_setting() -> None:
    recognizer = WhisperRecognizer("base", {"zul": "/nonexistent/whisper-zu"})
    with pytest.raises(Unavailable, match=SETTING):
        recognizer.model("zul")


def test_configured_language_model_is_used(
    pipeline: TranscriptionPipeline, settings: Settings, clips, tmp_path: Path
) -> None:
    """A per-language model (here: a second copy of Whisper base in its own directory) serves that language."""
    model_dir = whisper_weights.ensure_whisper_base(tmp_path)
    custom = TranscriptionPipeline(
        settings.updated({"speech": {"language_models": {"afr": str(model_dir)}}}).speech, settings.data_dir
    )
    record = _record(custom.transcribe(_wav(tmp_path, "s0", clips["s0"]), "afr"))
    assert record["language_code"] == "afr"
    assert record["model"] == str(model_dir)
    assert custom.models.route("afr").recognizer.loaded() == ["afr"]  # the default model was never needed


# ------------------------------------------------------------------------------------------ transcription


def test_english_with_auto_detection_and_word_timestamps(
    pipeline: TranscriptionPipeline, clips, tmp_path: Path
) -> None:
    audio = np.concatenate([silence(1.0), clips["s1"], silence(1.5), clips["s2"], silence(0.8)])
    path = write_audio(audio, SAMPLE_RATE, tmp_path / "two.mp3", "mp3")
    record = _record(pipeline.transcribe(path, None))
    assert record["language_code"] == "eng"
    assert 0.5 < record["language_probability"] <= 1.0
    errors, words = word_errors(SENTENCES[1] + " " + SENTENCES[2], record["transcription_text"])
    assert errors / words <= 0.25, record["transcription_text"]
    assert record["audio_length_seconds"] == pytest.approx(audio.size / SAMPLE_RATE, abs=0.1)
    assert record["sample_rate"] == 22050 and record["channels"] == 1 and record["mime_type"] == "audio/mpeg"
    assert record["diarisation_result"]["speaker_ids"] == []  # diarisation off: the spec's arrays are empty

    times = [(w["start_time"], w["end_time"]) for w in record["words"]]
    assert all(s <= e for s, e in times)
    assert all(a[0] <= b[0] for a, b in zip(times, times[1:]))
    assert times[0][0] >= 0.6  # the leading second of silence is not speech
    assert times[-1][1] <= record["audio_length_seconds"] + 0.05

    timeline = record["diarisation_result"]["timeline"]
    assert timeline[0]["type"] == "silence" and timeline[-1]["type"] == "silence"
    assert {i["type"] for i in timeline} == {"speech", "silence"}
    assert all(a["end_time"] <= b["start_time"] + 1e-6 for a, b in zip(timeline, timeline[1:]))
    spoken = " ".join(i["text"] for i in timeline if i["type"] == "speech")
    assert spoken == record["transcription_text"]


def test_silence_only_has_no_text(pipeline: TranscriptionPipeline, tmp_path: Path) -> None:
    noise = (0.001 * np.random.default_rng(1).standard_normal(3 * SAMPLE_RATE)).astype(np.float32)
    record = _record(pipeline.transcribe(_wav(tmp_path, "quiet", noise), None))
    assert record["transcription_text"] == ""
    assert record["language_code"] == "und"
    assert any("No speech" in w for w in record["warnings"])
    assert [i["type"] for i in record["diarisation_result"]["timeline"]] == ["silence"]


def test_long_audio_is_transcribed_in_windows_cut_in_silence(
    pipeline: TranscriptionPipeline, settings: Settings, clips, tmp_path: Path
) -> None:
    parts = []
    for i in range(len(SENTENCES)):
        parts += [clips[f"s{i}"], silence(1.2)]
    audio = np.concatenate(parts)
    assert audio.size / SAMPLE_RATE > 35
    short_windows = settings.speech.model_copy(update={"window_seconds": 30.0})
    windowed = TranscriptionPipeline(short_windows, settings.data_dir, models=pipeline.models)
    # where the windows fall: every cut lies in a pause between two sentences
    cuts = list(
        windows(
            iter([audio[i : i + 10 * SAMPLE_RATE] for i in range(0, audio.size, 10 * SAMPLE_RATE)]),
            windowed.files.window_seconds,
            speech_chunks,
        )
    )
    assert len(cuts) >= 2 and sum(w.audio.size for w in cuts) == audio.size
    for w in cuts[:-1]:
        cut = (w.offset + w.audio.size) / SAMPLE_RATE
        assert float(np.abs(audio[int((cut - 0.1) * SAMPLE_RATE) : int((cut + 0.1) * SAMPLE_RATE)]).max()) < 0.01

    record = _record(windowed.transcribe(_wav(tmp_path, "long", audio), "eng"))
    errors, words = word_errors(" ".join(SENTENCES), record["transcription_text"])
    assert errors / words <= 0.3, record["transcription_text"]
    last_start = sum(p.size for p in parts[:-2]) / SAMPLE_RATE
    late = [w for w in record["words"] if w["start_time"] >= last_start - 0.3]
    assert "holidays" in " ".join(w["word"].lower() for w in late)  # times of later windows are offset right


def test_silence_cut_prefers_the_longest_pause_of_the_last_minute() -> None:
    s = SAMPLE_RATE
    chunks = [
        {"start": 0, "end": 70 * s},
        {"start": 72 * s, "end": 100 * s},
        {"start": 100 * s + s // 2, "end": 119 * s},
    ]
    assert silence_cut(chunks, 120 * s) == 71 * s  # the 2 s pause beats the 0.5 s one and the 1 s tail
    early = [{"start": 0, "end": 50 * s}, {"start": 55 * s, "end": 119 * s}]
    assert silence_cut(early, 120 * s) == 119 * s + s // 2  # a pause before the last minute is not used
    assert silence_cut([{"start": 0, "end": 120 * s}], 120 * s) == 120 * s  # unbroken speech: hard cut


def test_music_is_marked_and_not_transcribed(pipeline: TranscriptionPipeline, clips, tmp_path: Path) -> None:
    audio = np.concatenate([clips["s0"], silence(0.5), tone_music(8.0), silence(0.5), clips["s1"]])
    music_start = (clips["s0"].size + 0.5 * SAMPLE_RATE) / SAMPLE_RATE
    record = _record(pipeline.transcribe(_wav(tmp_path, "hold", audio), "eng", detect_music=True))
    music = [i for i in record["diarisation_result"]["timeline"] if i["type"] == "music"]
    assert music, record["diarisation_result"]["timeline"]
    assert music[0]["start_time"] == pytest.approx(music_start, abs=1.0)
    assert music[0]["end_time"] - music[0]["start_time"] >= 6.0
    assert any("Music detected" in w for w in record["warnings"])
    for w in record["words"]:
        middle = (w["start_time"] + w["end_time"]) / 2
        assert not any(m["start_time"] <= middle <= m["end_time"] for m in music)
    errors, words = word_errors(SENTENCES[0] + " " + SENTENCES[1], record["transcription_text"])
    assert errors / words <= 0.35, record["transcription_text"]


def test_diarisation_gives_every_word_a_speaker(pipeline: TranscriptionPipeline, clips, tmp_path: Path) -> None:
    other = speech_16k(
        "I would like to check the balance of my savings account please.", tmp_path, "f", voice="en+f4", speed=140
    )
    audio = np.concatenate([clips["s2"], silence(0.7), other, silence(0.7), clips["s3"]])
    record = _record(pipeline.transcribe(_wav(tmp_path, "dialogue", audio), "eng", diarise=True))
    result = record["diarisation_result"]
    n = len(record["words"])
    assert n > 10
    assert len(result["starts"]) == len(result["ends"]) == len(result["speaker_ids"]) == len(result["words"]) == n
    assert all(result["speaker_ids"]) and all(w["speaker_id"] for w in record["words"])
    speech_items = [i for i in result["timeline"] if i["type"] == "speech"]
    assert all(i["speaker_id"] for i in speech_items)
    for item in speech_items:  # a speech item never mixes speakers
        assert {w["speaker_id"] for w in item["words"]} == {item["speaker_id"]}


def test_deadline_stops_the_work(pipeline: TranscriptionPipeline, clips, tmp_path: Path) -> None:
    with pytest.raises(TimedOut):
        pipeline.transcribe(_wav(tmp_path, "s4", clips["s4"]), "eng", timeout_s=1e-4)


def test_unknown_language_is_rejected_before_decoding(pipeline: TranscriptionPipeline, tmp_path: Path) -> None:
    junk = tmp_path / "junk.wav"
    junk.write_text("not audio")  # the language is checked first: 400, not 415
    with pytest.raises(InvalidInput, match="isiZulu"):
        pipeline.transcribe(junk, "zul")


def test_streaming_buffer_commits_segments_before_the_last_pause(pipeline: TranscriptionPipeline, clips) -> None:
    audio = np.concatenate([clips["s5"], silence(1.0), clips["s6"]])
    pause = (clips["s5"].size + 0.5 * SAMPLE_RATE) / SAMPLE_RATE
    result = pipeline.live.step_audio(
        audio, None, offset=10.0, commit_before=audio.size / SAMPLE_RATE - 0.5
    ).model_dump()
    assert result["language_code"] == "eng"
    assert result["cut_seconds"] == pytest.approx(pause, abs=0.6)
    assert result["final"] and result["pending"]
    assert all(s["end_time"] <= 10.0 + result["cut_seconds"] for s in result["final"])
    assert all(s["start_time"] >= 10.0 for s in result["final"])  # offsets are applied
    final_text = " ".join(s["text"] for s in result["final"])
    assert word_errors(SENTENCES[5], final_text)[0] / len(SENTENCES[5].split()) <= 0.35
    assert "platform" in result["pending_text"].lower()


def test_a_stream_hears_its_last_commit_again_and_commits_each_word_once(
    pipeline: TranscriptionPipeline, clips
) -> None:
    """What a step commits stays at the buffer's head with its text (live.steps.live_step): the next exact decode
    hears it first, is made to start with its text and answers only what follows, timed after it."""
    import asyncio

    from contracts.speech import StreamRequest, StreamStep
    from serve_app.services.live.state import StreamState
    from serve_app.services.live.steps import live_step

    requests: list[StreamRequest] = []

    class Engine:  # a SpeechClient over the pipeline, in this thread
        async def live_step(self, request: StreamRequest) -> StreamStep:
            requests.append(request)
            return pipeline.live_step(request)

    first = np.concatenate([clips["s5"], silence(0.8), clips["s6"][: SAMPLE_RATE // 2]])
    pcm = (np.concatenate([first, clips["s6"][SAMPLE_RATE // 2 :], silence(0.3)]) * 32767).astype(np.int16)
    state = StreamState("eng")
    state.add_audio(pcm[: first.size].tobytes(), 1 << 30)
    step = asyncio.run(live_step(Engine(), state, final=False))
    assert step.committed and "payment" in step.committed[0].text
    assert 0 < state.context_seconds <= 4.0 and state.context_text == state.committed_text()
    assert state.offset + state.context_seconds == pytest.approx(step.step.cut_seconds, abs=0.01)
    state.add_audio(pcm[first.size :].tobytes(), 1 << 30)
    last = asyncio.run(live_step(Engine(), state, final=True))
    assert requests[-1].context_text == state.segments[0].text and requests[-1].context_seconds > 0
    text = " ".join(s.text for s in last.committed)
    assert "platform" in text.lower() and "payment" not in text.lower()  # the context is not committed twice
    assert last.committed[0].start_time >= step.step.cut_seconds - 0.3
    assert word_errors(" ".join(SENTENCES[5:7]), state.committed_text())[0] <= 3


@pytest.mark.parametrize("more_speech", [False, True])
def test_a_step_in_a_short_silence_decodes_exactly_and_the_last_step_reuses_it(
    pipeline: TranscriptionPipeline, clips, monkeypatch: pytest.MonkeyPatch, more_speech: bool
) -> None:
    """A step whose speech ended in a silence shorter than a commit pause decodes the uncommitted speech exactly
    (word times) and says so; the last step returns that decode without decoding again when only silence followed
    (the end of an utterance then waits for the VAD alone), and decodes again when speech followed."""
    import asyncio

    from contracts.speech import StreamRequest, StreamStep
    from serve_app.services.live.state import StreamState
    from serve_app.services.live.steps import live_step

    class Engine:  # a SpeechClient over the pipeline, in this thread
        async def live_step(self, request: StreamRequest) -> StreamStep:
            return pipeline.live_step(request)

    decoded: list[int] = []
    whisper = pipeline.models.route("eng").recognizer
    exact_segments = whisper.exact_segments
    monkeypatch.setattr(
        whisper,
        "exact_segments",
        lambda audio, route, chunks, **kw: decoded.append(len(chunks)) or exact_segments(audio, route, chunks, **kw),
    )

    def pcm(audio: np.ndarray) -> bytes:
        return (audio * 32767).astype(np.int16).tobytes()

    spoken = clips["s5"][: int(np.flatnonzero(np.abs(clips["s5"]) > 0.01)[-1])]  # without the clip's own silence
    state = StreamState("eng")
    state.add_audio(pcm(spoken[: spoken.size // 2]), 1 << 30)
    talking = asyncio.run(live_step(Engine(), state, final=False))
    assert talking.step.exact_until == 0 and state.exact_tail == []  # speech to the end: a quick partial
    state.add_audio(pcm(np.concatenate([spoken[spoken.size // 2 :], silence(0.2)])), 1 << 30)
    paused = asyncio.run(live_step(Engine(), state, final=False))
    assert paused.step.cut_seconds == 0 and paused.committed == []  # 0.2 s is no commit pause
    assert paused.step.exact_until == pytest.approx(state.audio_seconds, abs=0.01)
    assert paused.step.pending and paused.step.pending[0].words  # an exact decode: words with times
    assert state.exact_tail == paused.step.pending
    more = np.concatenate([silence(0.5), clips["s6"]]) if more_speech else silence(0.2)
    state.add_audio(pcm(more), 1 << 30)
    decoded.clear()
    last = asyncio.run(live_step(Engine(), state, final=True))
    if more_speech:
        assert any(decoded) and "platform" in state.committed_text().lower()
    else:
        assert not any(decoded)  # nothing decoded again
        assert last.committed == paused.step.pending
    said = " ".join(SENTENCES[5:7] if more_speech else SENTENCES[5:6])
    assert word_errors(said, state.committed_text())[0] <= 3


def test_the_last_step_gets_the_exact_tail_only_in_the_language_it_was_decoded_in(
    pipeline: TranscriptionPipeline, clips
) -> None:
    """A session that changes its language after a step decoded its speech exactly (a ``config`` message) has its
    last step decode again, in the new language, rather than return the old decode."""
    import asyncio

    from contracts.speech import StreamRequest, StreamStep
    from serve_app.services.live.state import StreamState
    from serve_app.services.live.steps import live_step

    requests: list[StreamRequest] = []

    class Engine:  # a SpeechClient over the pipeline, in this thread
        async def live_step(self, request: StreamRequest) -> StreamStep:
            requests.append(request)
            return pipeline.live_step(request)

    spoken = clips["s5"][: int(np.flatnonzero(np.abs(clips["s5"]) > 0.01)[-1])]
    pcm = (np.concatenate([spoken, silence(0.2)]) * 32767).astype(np.int16).tobytes()
    for language, reused in (("eng", True), ("afr", False)):
        state = StreamState("eng")
        state.add_audio(pcm, 1 << 30)
        assert asyncio.run(live_step(Engine(), state, final=False)).step.exact_until > 0
        state.lang_code = language
        asyncio.run(live_step(Engine(), state, final=True))
        assert bool(requests[-1].exact_tail) is reused and (requests[-1].exact_until > 0) is reused


def test_uncertain_detection_is_confirmed_by_the_text_language(pipeline: TranscriptionPipeline, clips) -> None:
    import engines.text.langid  # noqa: F401  (our module: a broken import must fail this test, not skip it)
    from engines.speech.file_transcription import _Pass
    from engines.speech.recognition import Detection, SpeechSegment
    from engines.speech.windows import Window

    audio = clips["s3"]
    window = Window(0, audio, speech_chunks(audio))
    routes = pipeline.models.routes()
    afrikaans = SpeechSegment(0.0, 3.0, "Die kinders speel sokker in die park na skool en ons koop brood en melk.")
    uncertain = _Pass(
        route=routes["eng"],
        detection=Detection("eng", 0.55, [("eng", 0.55), ("afr", 0.45)]),
        segments=[afrikaans],
        samples=audio.size,
    )
    again = pipeline.files._confirm_language(uncertain, lambda: iter([window]), None)
    assert again.route is not None and again.route.code == "afr"
    assert "uncertain" in again.warnings[0]
    assert again.segments  # the audio was transcribed again, as Afrikaans

    certain = _Pass(
        route=routes["eng"], detection=Detection("eng", 0.95, [("eng", 0.95)]), segments=[afrikaans], samples=audio.size
    )
    assert pipeline.files._confirm_language(certain, lambda: iter([window]), None) is certain


# ------------------------------------------------------------------------------------------ truthful detection

# Article 1 of the Universal Declaration in Setswana, spoken by espeak-ng's Setswana voice: a synthetic stand-in for
# real speech in a language Whisper base has no model for (real isiZulu, isiXhosa, Setswana and Sepedi recordings
# are measured by scripts/eval_real.py; figures in docs/speech.md)
SETSWANA = (
    "Batho botlhe ba tsetswe ba gololesegile le go lekalekana ka seriti le ditshwanelo. Ba abetswe go akanya le "
    "maikutlo, mme ba tshwanetse go direlana ka mowa wa bokaulengwe."
)


@pytest.fixture(scope="module")
def setswana(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    return speech_16k(SETSWANA, tmp_path_factory.mktemp("tn"), "tn", voice="tn")


def test_audio_in_a_language_without_a_model_is_refused_not_answered(
    pipeline: TranscriptionPipeline, setswana: np.ndarray, tmp_path: Path
) -> None:
    path = _wav(tmp_path, "tn", setswana)
    with pytest.raises(LanguageNotServed) as info:
        pipeline.transcribe(path, None)
    detail = info.value.detail
    assert isinstance(info.value, InvalidInput)  # 400 at the edge
    assert SPEECH_SETTING in detail and "without a speech model" in detail and "lang_code" in detail
    served = float(re.search(r"score (\d+\.\d)% together", detail).group(1))  # type: ignore[union-attr]
    assert served < 100 * pipeline.served_floor  # the served languages' own mass, not renormalised
    # a caller who names the language decides: the same audio is transcribed
    assert pipeline.transcribe(path, "eng").language_code == "eng"


def test_warn_policy_transcribes_with_a_warning_naming_the_problem(
    pipeline: TranscriptionPipeline, settings: Settings, setswana: np.ndarray, tmp_path: Path
) -> None:
    policy = settings.speech.model_copy(update={"unserved_language": "warn"})
    warn = TranscriptionPipeline(policy, settings.data_dir, models=pipeline.models)
    result = warn.transcribe(_wav(tmp_path, "tn", setswana), None)
    assert result.language_code in ("afr", "eng", "fra")
    assert any("without a speech model" in w and "unreliable" in w for w in result.warnings), result.warnings
    assert not screening.repeats(result.text)


def test_a_live_stream_settles_unmistakable_speech_at_once_and_refuses_only_once_it_has_heard_enough(
    pipeline: TranscriptionPipeline, setswana: np.ndarray
) -> None:
    start = setswana[: 2 * SAMPLE_RATE]
    step = pipeline.live.step_audio(start, None)
    # a language without a model is not unmistakably a served one: nothing shown, and the step says so
    assert not step.language_settled and step.language_code == "" and step.pending_text == "" and not step.final
    assert not step.pending
    with pytest.raises(LanguageNotServed):
        pipeline.live.step_audio(setswana, None)  # more than 6 s of speech
    try:  # the stream ended: decide on what there is, never silently (2 s is too short to be sure either way)
        last = pipeline.live.step_audio(start, None, final=True)
        assert any("uncertain" in w for w in last.warnings), last
    except LanguageNotServed:
        pass
    # clear English (Whisper's detection and the transcript's text language agree) is settled on its first segment
    folder, name = _tmp()
    first = speech_16k(SENTENCES[0], folder, name)
    english = pipeline.live.step_audio(np.concatenate([silence(0.3), first]), None)
    assert english.language_settled and english.language_code == "eng" and "report" in english.pending_text
    assert english.language_probability is not None and english.language_probability >= 0.8
    # its first second is too little to say: unsettled, its decode kept only as the candidate to agree with
    opening = pipeline.live.step_audio(np.concatenate([silence(0.3), first[:SAMPLE_RATE]]), None)
    assert not opening.language_settled and not opening.pending and not opening.pending_text


def _tmp() -> tuple[Path, str]:
    import tempfile

    return Path(tempfile.mkdtemp(prefix="khuluma-test-")), "s0-stream"


def test_a_decoder_loop_never_reaches_the_transcript(
    pipeline: TranscriptionPipeline, setswana: np.ndarray, tmp_path: Path
) -> None:
    """Speech in a language without a model, forced into English (a caller's lang_code), makes Whisper base loop
    ("What's up, what's up, ..."), as real isiZulu does; the guard leaves the loop out and says so."""
    audio = np.concatenate([silence(0.5), setswana, silence(0.5)])
    route = pipeline.models.route("eng")
    raw = list(route.recognizer.transcribe(audio, route, speech_chunks(audio)))
    assert any(screening.repeats(s.text) for s in raw), f"precondition: Whisper no longer loops on this clip: {raw}"
    record = _record(pipeline.transcribe(_wav(tmp_path, "tn-eng", audio), "eng"))
    assert not screening.repeats(record["transcription_text"]), record["transcription_text"]
    assert any("repeated itself" in w for w in record["warnings"]), record["warnings"]
    for item in record["diarisation_result"]["timeline"]:
        assert not screening.repeats(item["text"])
    step = pipeline.live.step_audio(audio, "eng", final=True)  # live partials and finals: the same guard
    assert not any(screening.repeats(s.text) for s in step.pending + step.final)
    assert any("repeated itself" in w for w in step.warnings)


def test_every_speech_item_carries_a_confidence(pipeline: TranscriptionPipeline, clips, tmp_path: Path) -> None:
    record = _record(pipeline.transcribe(_wav(tmp_path, "s6", clips["s6"]), "eng"))
    speech = [i for i in record["diarisation_result"]["timeline"] if i["type"] == "speech"]
    assert speech and all(0.3 < i["confidence"] <= 1.0 for i in speech), speech
    step = pipeline.live.step_audio(clips["s6"], "eng")
    assert all(0.3 < s.confidence <= 1.0 for s in step.pending if s.confidence is not None) and step.pending


def test_a_judged_stream_withholds_a_segment_in_a_language_without_a_model(
    pipeline: TranscriptionPipeline, setswana: np.ndarray, clips: dict[str, np.ndarray]
) -> None:
    """Once a stream without a given language has settled on English, each committed segment is judged on its own
    speech: English is written in English, Setswana is withheld with the setting that adds a model; a language the
    caller gave is trusted, as for files; a partial too short to judge shows nothing."""
    english = np.concatenate([clips["s1"], silence(0.8)])
    kept = pipeline.live.step_audio(english, "eng", commit_before=english.size / SAMPLE_RATE, judge=True)
    assert kept.final and not kept.withheld and all(s.language_code == "eng" for s in kept.final)
    assert "bread" in " ".join(s.text for s in kept.final).lower()

    switched = np.concatenate([setswana, silence(0.8)])
    step = pipeline.live.step_audio(switched, "eng", offset=10.0, commit_before=switched.size / SAMPLE_RATE, judge=True)
    assert not step.final and not step.pending and step.cut_seconds > 0
    [withheld] = step.withheld
    assert 10.0 <= withheld.start_time < withheld.end_time <= 10.0 + switched.size / SAMPLE_RATE
    assert "KHULUMA_SPEECH_LANGUAGE_MODELS" in withheld.detail

    trusted = pipeline.live.step_audio(switched, "eng", commit_before=switched.size / SAMPLE_RATE)
    assert not trusted.withheld and all(s.language_code is None for s in trusted.final)

    short = pipeline.live.step_audio(clips["s1"][: int(1.5 * SAMPLE_RATE)], "eng", judge=True)
    assert not short.pending and short.pending_text == ""


def test_a_live_segment_whose_short_window_decode_derails_is_decoded_in_the_padded_window(
    pipeline: TranscriptionPipeline, clips: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whisper in a short window can lose a segment's speech (a loop below its confidence floor, as on a real FLEURS
    clip); the segment is then decoded as files are, never committed as the loop."""
    from types import SimpleNamespace

    from engines.speech.whisper.adapter import ShortWindowDecoder

    def derailed(self, speech, prefix="", prefix_seconds=0.0, max_tokens=None, *, detect=False):  # type: ignore[no-untyped-def]
        return [SimpleNamespace(text=" 20 20", avg_logprob=-2.5, start=0.0, end=1.0, words=[])], []

    monkeypatch.setattr(ShortWindowDecoder, "decode_heard", derailed)
    audio = np.concatenate([silence(0.3), clips["s0"], silence(0.8)])
    step = pipeline.live.step_audio(audio, "eng", commit_before=audio.size / SAMPLE_RATE)
    text = " ".join(s.text for s in step.final)
    assert "report" in text and "20 20" not in text, step

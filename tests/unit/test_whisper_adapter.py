"""The faster-whisper internals engines/speech/whisper/adapter.py relies on: their signatures, fields and behaviour.

An upgrade of faster-whisper that renames, moves or changes one fails here with the internal's name, not as a
wrong transcript later. The real Whisper base model (shipped offline) answers the model-level checks."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contracts.settings import Settings
from engines.speech.whisper import adapter as fw
from engines.speech.whisper.weights import ensure_whisper_base
from tests.speechdata import silence, speech_16k

SR = fw.SAMPLE_RATE


def params(func: Any) -> list[str]:
    return list(inspect.signature(func).parameters)


def test_internal_signatures_are_those_the_adapter_calls() -> None:
    from faster_whisper import BatchedInferencePipeline, WhisperModel
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import restore_speech_timestamps
    from faster_whisper.vad import collect_chunks

    pinned = {
        "faster_whisper.vad.collect_chunks": (collect_chunks, ["audio", "chunks", "sampling_rate", "max_duration"]),
        "faster_whisper.transcribe.restore_speech_timestamps": (
            restore_speech_timestamps,
            ["segments", "speech_chunks", "sampling_rate"],
        ),
        "BatchedInferencePipeline.forward": (
            BatchedInferencePipeline.forward,
            ["self", "features", "tokenizer", "chunks_metadata", "options"],
        ),
        "BatchedInferencePipeline.__init__": (BatchedInferencePipeline.__init__, ["self", "model"]),
        "faster_whisper.tokenizer.Tokenizer": (Tokenizer.__init__, ["self", "tokenizer", "multilingual", "task"]),
        "faster_whisper.audio.pad_or_trim": (pad_or_trim, ["array", "length", "axis"]),
        # ShortWindowDecoder: transcribe's steps for one window
        "WhisperModel.encode": (WhisperModel.encode, ["self", "features"]),
        "WhisperModel.get_prompt": (
            WhisperModel.get_prompt,
            ["self", "tokenizer", "previous_tokens", "without_timestamps", "prefix"],
        ),
        "WhisperModel.generate_with_fallback": (
            WhisperModel.generate_with_fallback,
            ["self", "encoder_output", "prompt", "tokenizer", "options"],
        ),
        "WhisperModel.add_word_timestamps": (
            WhisperModel.add_word_timestamps,
            [
                "self",
                "segments",
                "tokenizer",
                "encoder_output",
                "num_frames",
                "prepend_punctuations",
                "append_punctuations",
                "last_speech_timestamp",
            ],
        ),
    }
    for name, (func, expected) in pinned.items():
        got = params(func)
        assert got[: len(expected)] == expected, f"{name} now takes {got}; the adapter passes {expected}"
    assert "language" in params(Tokenizer.__init__), "faster_whisper.tokenizer.Tokenizer lost its language"


def test_segment_word_and_info_fields() -> None:
    from faster_whisper.transcribe import Segment, TranscriptionInfo, TranscriptionOptions, Word

    def fields(cls: Any) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    segment = {"id", "seek", "start", "end", "text", "tokens", "avg_logprob", "compression_ratio"}
    segment |= {"no_speech_prob", "words", "temperature"}
    assert fields(Segment) == segment, f"faster_whisper Segment fields changed: {fields(Segment)}"
    assert fields(Word) == {"start", "end", "word", "probability"}, f"Word fields changed: {fields(Word)}"
    assert "transcription_options" in fields(TranscriptionInfo)
    assert {"beam_size", "temperatures", "word_timestamps", "suppress_tokens"} <= fields(TranscriptionOptions)


def test_packing_and_restoring_times_round_trip() -> None:
    """Three chunks packed end to end (and into windows), and times in the packed speech mapped back."""
    from faster_whisper.transcribe import Segment, Word

    audio = np.arange(10 * SR, dtype=np.float32)
    chunks = [{"start": SR, "end": 2 * SR}, {"start": 4 * SR, "end": 6 * SR}, {"start": 8 * SR, "end": 9 * SR}]
    packed = fw.pack_speech(audio, chunks)
    assert packed.dtype == np.float32 and packed.flags.c_contiguous
    np.testing.assert_array_equal(packed, np.concatenate([audio[c["start"] : c["end"]] for c in chunks]))

    pieces, metadata = fw.pack_windows(audio, chunks, max_seconds=3.0)  # 1 s + 2 s, then 1 s
    assert [p.size for p in pieces] == [3 * SR, SR]
    assert [(m["offset"], m["duration"]) for m in metadata] == [(0.0, 3.0), (3.0, 1.0)]
    np.testing.assert_array_equal(pieces[1], audio[8 * SR : 9 * SR])  # forward() reads offset and duration only

    word = Word(start=1.5, end=1.8, word=" hi", probability=0.9)  # packed 1.5 s: 0.5 s into the second chunk
    segments = [
        Segment(0, 0, 0.2, 0.6, " a", [], 0.0, 1.0, 0.0, None, 0.0),  # no words: the segment's own times
        Segment(1, 0, 1.4, 1.9, " hi", [], 0.0, 1.0, 0.0, [word], 0.0),
    ]
    restored = list(fw.restore_times(segments, chunks))
    assert [(s.start, s.end) for s in restored[:1]] == [(1.2, 1.6)]
    assert (word.start, word.end) == (4.5, 4.8) and (restored[1].start, restored[1].end) == (4.5, 4.8)


def test_segments_of_windows_builds_faster_whisper_segments() -> None:
    part = {
        "seek": 0,
        "start": 0.12345,
        "end": 1.0,
        "text": " hello",
        "tokens": [1, 2],
        "avg_logprob": -0.2,
        "compression_ratio": 1.1,
        "no_speech_prob": 0.01,
        "words": [{"start": 0.1, "end": 0.5, "word": " hello", "probability": 0.9}],
    }
    (segment,) = fw.segments_of_windows([[part]])
    assert segment.id == 1 and segment.start == 0.123 and segment.words[0].word == " hello"


def test_speech_timestamps_find_speech_in_silence(tmp_path: Path) -> None:
    """faster-whisper's VAD (its public API, every family's: engines/speech/vad.py)."""
    from engines.speech.vad import speech_timestamps

    audio = np.concatenate([silence(1.0), speech_16k("Please call me back tomorrow.", tmp_path, "vad"), silence(1.0)])
    chunks = speech_timestamps(audio, min_silence_ms=300, min_speech_ms=250, pad_ms=100)
    assert chunks and all(isinstance(c["start"], int) and c["start"] < c["end"] for c in chunks)
    assert chunks[0]["start"] >= int(0.8 * SR) and chunks[-1]["end"] <= audio.size - int(0.8 * SR)
    assert speech_timestamps(np.zeros(100, dtype=np.float32)) == []


@pytest.fixture(scope="module")
def whisper(settings: Settings) -> Any:
    from faster_whisper import WhisperModel

    return WhisperModel(str(ensure_whisper_base(settings.data_dir)), device="cpu", compute_type="int8")


def test_model_internals_the_adapter_reaches(whisper: Any) -> None:
    assert fw.is_multilingual(whisper) is True  # WhisperModel.model.is_multilingual
    assert callable(whisper.feature_extractor) and hasattr(whisper.model, "generate")
    assert whisper.hf_tokenizer.token_to_id("<|endoftext|>") is not None
    assert whisper.max_length == 448  # ShortWindowDecoder keeps a prompt and its new tokens within it
    features = fw.window_features(whisper, [np.zeros(SR, dtype=np.float32)])
    assert features[0].shape[-1] == 3000  # padded to Whisper's 30 s


def test_batched_decoder_and_unpadded_decode_on_real_speech(whisper: Any, tmp_path: Path) -> None:
    """BatchedInferencePipeline.transcribe gives options without decoding; forward() answers segment dicts with
    the keys segments_of_windows reads; the unpadded decode reads a short sentence."""
    speech = speech_16k("The train leaves from platform four.", tmp_path, "batch")
    audio = np.concatenate([silence(0.5), speech, silence(0.5)])
    chunks = [{"start": int(0.4 * SR), "end": audio.size - int(0.4 * SR)}]
    decoder = fw.BatchedDecoder(whisper, "en", beam_size=1)
    assert decoder.options.word_timestamps and decoder.options.temperatures == [0.0]
    pieces, metadata = fw.pack_windows(audio, chunks, 30.0)
    decoded = decoder.decode(np.stack(fw.window_features(whisper, pieces)), metadata)
    assert len(decoded) == 1 and decoded[0], "BatchedInferencePipeline.forward gave no segment"
    keys = {"seek", "start", "end", "text", "tokens", "avg_logprob", "compression_ratio", "no_speech_prob", "words"}
    assert keys <= set(decoded[0][0]), f"forward()'s segments changed keys: {set(decoded[0][0])}"
    segments = list(fw.restore_times(fw.segments_of_windows(decoded), chunks))
    text = " ".join(s.text for s in segments).lower()
    assert "platform" in text and segments[0].words[0].start >= 0.3

    quick = fw.decode_unpadded(whisper, speech, "en", max_tokens=40)
    assert "platform" in quick.text.lower() and quick.avg_logprob < 0 and 0.0 <= quick.no_speech_prob <= 1.0
    assert quick.languages == []  # not asked for
    checked = fw.decode_unpadded(whisper, speech, "en", max_tokens=40, detect=True)
    assert checked.text == quick.text
    tokens = [token for token, _ in checked.languages]
    assert tokens[0] == "en" and "sw" in tokens and "zu" not in tokens  # Whisper's plain codes; it has no isiZulu
    assert abs(sum(p for _, p in checked.languages) - 1.0) < 0.01


def test_short_window_decode_with_and_without_what_was_heard(whisper: Any, tmp_path: Path) -> None:
    """ShortWindowDecoder: transcribe's options (word times, no timestamp tokens), one segment of a short window
    ending its text (no repeat), and with a prefix only the words after it, timed after it."""
    first = speech_16k("Thank you for calling.", tmp_path, "heard")
    second = speech_16k("The train leaves from platform four.", tmp_path, "new")
    decoder = fw.ShortWindowDecoder(whisper, "en", beam_size=5, temperatures=(0.0,))
    assert decoder.options.word_timestamps and decoder.options.without_timestamps
    alone = decoder.decode(second, max_tokens=60)
    assert len(alone) == 1 and alone[0].text.lower().count("platform") == 1 and alone[0].words
    both = np.concatenate([first, silence(0.2), second])
    heard = (first.size + 0.2 * SR) / SR
    after = decoder.decode(both, "Thank you for calling.", heard, max_tokens=60)
    assert len(after) == 1 and "platform" in after[0].text.lower() and "calling" not in after[0].text.lower()
    assert after[0].words[0].start >= heard - 0.3 and after[0].words[-1].end <= both.size / SR + 0.1
    # the language check of a segment shares the decode's encoding: the same words, and Whisper's detection on it
    shared, languages = decoder.decode_heard(second, max_tokens=60, detect=True)
    assert [s.text for s in shared] == [s.text for s in alone] and languages[0][0] == "en"
    assert fw.short_window_languages(whisper, second)[0][0] == "en"

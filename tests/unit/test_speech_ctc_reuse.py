"""A live stream's CTC passes reused: only the new tail goes through the model, joined to the last pass's frames."""

from __future__ import annotations

import numpy as np
import pytest

from engines.speech.ctc import decoding as ctc
from engines.speech.ctc.recognizer import CTCRecognizer
from engines.speech.ctc.reuse import OVERLAP_SECONDS, PassReuse
from tests.speech_models import TinyCTCModels, session_ctc_models, speechlike

SR = 16_000
STRIDE = 320
VOCABULARY = 6


@pytest.fixture(scope="session")
def ctc_models(tmp_path_factory: pytest.TempPathFactory) -> TinyCTCModels:
    return session_ctc_models(tmp_path_factory)


def local_forward(audio: np.ndarray) -> np.ndarray:
    """Log-probabilities of a model whose every frame hears only its own 20 ms (what reuse assumes, made exact)."""
    frames = audio.size // STRIDE
    blocks = audio[: frames * STRIDE].reshape(frames, STRIDE)
    token = (np.abs(blocks).mean(axis=1) * 40).astype(int) % VOCABULARY
    out = np.full((frames, VOCABULARY), np.log(0.02), np.float32)
    out[np.arange(frames), token] = np.log(0.9)
    return out


def test_a_growing_stream_passes_only_its_new_tail_and_gets_the_frames_of_a_whole_pass() -> None:
    audio = speechlike(6.0, 7)
    reuse = PassReuse()
    first = reuse.frames(audio[: 4 * SR], "zul", local_forward)
    passed = reuse.samples_passed
    second = reuse.frames(audio[: 5 * SR], "zul", local_forward)
    whole_best, whole_posterior = ctc.best_frames(local_forward(audio[: 5 * SR]))
    assert np.array_equal(second.best, whole_best) and np.allclose(second.posterior, whole_posterior)
    assert np.array_equal(second.best[: first.best.size - 60], first.best[: first.best.size - 60])
    assert reuse.samples_passed - passed <= (1 + OVERLAP_SECONDS) * SR + STRIDE  # the new second and the overlap


def test_other_audio_another_language_or_little_shared_is_passed_whole() -> None:
    audio = speechlike(6.0, 8)
    reuse = PassReuse()
    reuse.frames(audio[: 4 * SR], "zul", local_forward)
    for key, piece in (("xho", audio[: 5 * SR]), ("zul", speechlike(5.0, 9)), ("zul", audio[SR : 5 * SR])):
        before = reuse.samples_passed
        reuse.frames(piece, key, local_forward)
        assert reuse.samples_passed - before == piece.size


def test_passes_kept_are_bounded() -> None:
    reuse = PassReuse(kept=3)
    for seed in range(6):
        reuse.frames(speechlike(2.5, seed), "zul", local_forward)
    assert len(reuse._passes) == 3


def test_the_recognizer_reuses_a_live_steps_pass_on_a_real_graph(ctc_models) -> None:
    recognizer = CTCRecognizer(ctc_models.omnilingual, cpu_threads=1)
    audio = speechlike(6.0, 10)
    step = [{"start": 0, "end": 4 * SR}]
    recognizer.transcribe(audio[: 4 * SR], step, reuse=True)
    passed = recognizer.passes.samples_passed
    grown = recognizer.transcribe(audio[: 5 * SR], [{"start": 0, "end": 5 * SR}], reuse=True)
    assert recognizer.passes.samples_passed - passed <= (1 + OVERLAP_SECONDS) * SR + STRIDE
    whole = recognizer.transcribe(audio[: 5 * SR], [{"start": 0, "end": 5 * SR}])
    assert grown and whole and grown[-1].end <= 5.0 + 1e-3
    words = [w.start for s in grown for w in s.words]
    assert words == sorted(words)
    # a file's transcription never reuses: the same audio twice is passed twice
    before = recognizer.passes.samples_passed
    recognizer.transcribe(audio[: 5 * SR], [{"start": 0, "end": 5 * SR}])
    assert recognizer.passes.samples_passed == before


def test_audio_all_heard_before_is_not_passed_again() -> None:
    audio = speechlike(5.0, 11)
    reuse = PassReuse()
    heard = reuse.frames(audio[: 4 * SR], "zul", local_forward)
    before = reuse.samples_passed
    ended = reuse.frames(audio[: int(3.6 * SR)], "zul", local_forward)  # the last step: trailing silence trimmed
    assert reuse.samples_passed == before
    assert np.array_equal(ended.best, heard.best[: ended.best.size]) and ended.best.size == int(3.6 * SR) // STRIDE


def test_a_model_whose_frames_depend_on_where_the_pass_starts_is_passed_whole() -> None:
    def by_position(audio: np.ndarray) -> np.ndarray:  # spells from its first frame, whatever it hears
        frames = audio.size // STRIDE
        out = np.full((frames, VOCABULARY), np.log(0.02), np.float32)
        out[np.arange(frames), (np.arange(frames) // 3) % VOCABULARY] = np.log(0.9)
        return out

    audio = speechlike(7.0, 12)
    reuse = PassReuse()
    reuse.frames(audio[: 4 * SR], "zul", by_position)
    grown = reuse.frames(audio[: 5 * SR], "zul", by_position)
    assert np.array_equal(grown.best, ctc.best_frames(by_position(audio[: 5 * SR]))[0])
    for seconds in (5.5, 6.0):  # no join ever held: after a few, no tail is tried
        reuse.frames(audio[: int(seconds * SR)], "zul", by_position)
    assert not reuse.joins
    before = reuse.samples_passed
    reuse.frames(audio, "zul", by_position)
    assert reuse.samples_passed - before == audio.size

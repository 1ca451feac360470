"""A third speech-model family, made here: registered with the family list (``engines.speech.families.register``)
and touching nothing else, it serves a language routed to a directory of its own (``speech.language_models``) for
files, live sessions (``serve_app.services.live.steps.live_step``, step after step) and ``/api/v1/models``.

The family is deterministic and has no model: each speech chunk the VAD finds is "heard" as the word its directory
names. The VAD is the service's (faster-whisper's Silero); no Whisper model is loaded (the language is given).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from contracts.errors import Unavailable
from contracts.quality import UNMEASURED
from contracts.settings import Settings
from contracts.speech import StreamRequest, StreamStep
from engines.speech import families
from engines.speech.pipeline import TranscriptionPipeline
from engines.speech.recognition import (
    Chunk,
    FamilySettings,
    Heard,
    LanguageDetector,
    Located,
    Route,
    Served,
    SpeechSegment,
    WordTiming,
)
from serve_app.services.live.state import StreamState
from serve_app.services.live.steps import live_step
from tests.speechdata import silence, speech_16k, write_audio

MARKER = "word-family.json"  # what makes a directory one of the family's models: {"word": ...}
RATE = 16_000


class WordRecognizer:
    """The family's :class:`~engines.speech.recognition.Recognizer`: every speech chunk is one segment of one word,
    timed as the chunk."""

    family = "words"
    fluent_means_language = False
    partial_is_exact = False
    detects_language = False
    batching = False
    detector: LanguageDetector | None = None

    def __init__(self, models: dict[str, Path]) -> None:
        self.models = models  # language -> its model directory
        self.warmed = False

    def word(self, route: Route) -> str:
        return str(json.loads((self.models[route.code] / MARKER).read_text())["word"])

    def routes(self) -> dict[str, Route]:
        return {code: Route(code, f"words:{code}", path.name, None, self) for code, path in self.models.items()}

    def transcribe(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[Chunk],
        *,
        offset: float = 0.0,
        deadline: float | None = None,
    ) -> Iterator[SpeechSegment]:
        word = self.word(route)
        for chunk in chunks:
            start, end = round(offset + chunk["start"] / RATE, 3), round(offset + chunk["end"] / RATE, 3)
            yield SpeechSegment(start, end, word, [WordTiming(f" {word}", start, end, 0.9)], -0.1, 0.0)

    def quick_segments(
        self, audio: np.ndarray, route: Route, chunks: list[Chunk], *, offset: float = 0.0, detect: bool = False
    ) -> Heard:
        return self._heard(audio, route, chunks, offset)

    def exact_segments(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[Chunk],
        *,
        offset: float = 0.0,
        heard: list[Chunk] | None = None,
        heard_text: str = "",
        detect: bool = False,
    ) -> Heard:
        return self._heard(audio, route, chunks, offset)

    def _heard(self, audio: np.ndarray, route: Route, chunks: list[Chunk], offset: float) -> Heard:
        seconds = sum(c["end"] - c["start"] for c in chunks) / RATE
        return Heard(list(self.transcribe(audio, route, chunks, offset=offset)), None, seconds)

    def quick_transcript(self, speech: np.ndarray, route: Route) -> tuple[str, float]:
        return self.word(route), -0.1

    def screen(self, segments: list[SpeechSegment]) -> tuple[list[SpeechSegment], list[str]]:
        return [s for s in segments if s.text], []

    def readable(self, text: str, seconds: float, logprob: float) -> bool:
        return bool(text)

    def language_blind(self, route: Route) -> bool:
        return False

    def served(self, route: Route) -> Served:
        return Served(route.model_ref, "One word per speech chunk.", UNMEASURED, "none (a test family)")

    def backend(self) -> str:
        return "words (a test family)"

    def warm_up(self) -> None:
        self.warmed = True


class WordFamily:
    """The family as the family list asks it."""

    name = "words"
    accepts = f"a directory with {MARKER}"

    def claims(self, model: Located) -> bool:
        return model.path is not None and (model.path / MARKER).is_file()

    def build(self, routed: list[Located], settings: FamilySettings) -> WordRecognizer | None:
        return WordRecognizer({m.code: m.path for m in routed if m.path is not None}) if routed else None


@pytest.fixture()
def word_family() -> Iterator[WordFamily]:
    family = WordFamily()
    families.register(family)
    yield family
    families.unregister(family)


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """Two utterances with a pause between them (two speech chunks for the VAD), silence around them."""
    folder = tmp_path_factory.mktemp("word-family")
    first = speech_16k("Please call me back tomorrow morning.", folder, "first")
    second = speech_16k("The report is ready for you now.", folder, "second")
    return np.concatenate([silence(0.4), first, silence(1.2), second, silence(0.8)])


def _pipeline(settings: Settings, tmp_path: Path, word: str = "dumela") -> TranscriptionPipeline:
    model = tmp_path / "tswana-words"
    model.mkdir(parents=True)
    (model / MARKER).write_text(json.dumps({"word": word}))
    speech = settings.speech.model_copy(update={"language_models": {"tsn": str(model)}})
    return TranscriptionPipeline(speech, settings.data_dir)


def test_a_third_family_transcribes_a_file_in_the_language_routed_to_it(
    word_family: WordFamily, settings: Settings, tmp_path: Path, spoken: np.ndarray
) -> None:
    pipeline = _pipeline(settings, tmp_path)
    route = pipeline.models.route("tsn")
    assert isinstance(route.recognizer, WordRecognizer) and route.recognizer.family == "words"
    result = pipeline.transcribe(write_audio(spoken, RATE, tmp_path / "spoken.wav", "wav"), "tsn")
    assert result.language_code == "tsn" and result.model == "tswana-words"
    assert result.text.split() == ["dumela"] * len(result.words) and len(result.words) >= 2
    duration = spoken.size / RATE
    assert all(0.1 <= w.start_time < w.end_time <= duration for w in result.words), result.words
    assert [w.start_time for w in result.words] == sorted(w.start_time for w in result.words)
    # the other languages stay with the families that served them
    assert pipeline.models.route("eng").recognizer.family == "whisper"


def test_a_third_family_serves_a_live_session_step_after_step(
    word_family: WordFamily, settings: Settings, tmp_path: Path, spoken: np.ndarray
) -> None:
    pipeline = _pipeline(settings, tmp_path, word="sawubona")
    steps: list[StreamStep] = []

    class Speech:  # the Speech deployment's handle, over the pipeline in this thread
        async def live_step(self, request: StreamRequest) -> StreamStep:
            steps.append(pipeline.live_step(request))
            return steps[-1]

    pcm = (spoken * 32767).astype("<i2").tobytes()
    state = StreamState("tsn")
    committed_before_end = []
    for i in range(0, len(pcm), 8000):  # a quarter of a second at a time
        if state.add_audio(pcm[i : i + 8000], 1 << 30):
            committed_before_end += asyncio.run(live_step(Speech(), state, final=False)).committed
    last = asyncio.run(live_step(Speech(), state, final=True))
    assert len(steps) >= 4 and all(s.language_code == "tsn" and s.language_settled for s in steps)
    assert any(s.pending_text == "sawubona" for s in steps[:-1])  # partials along the way
    assert committed_before_end and not last.step.pending  # committed at the pauses; nothing left at the end
    assert state.committed_text().split() == ["sawubona"] * len(state.segments) and len(state.segments) >= 2
    starts = [s.start_time for s in state.segments]
    assert starts == sorted(starts) and state.segments[-1].end_time <= spoken.size / RATE + 0.01


def test_a_third_family_is_listed_and_an_unclaimed_directory_names_what_every_family_accepts(
    word_family: WordFamily, settings: Settings, tmp_path: Path
) -> None:
    pipeline = _pipeline(settings, tmp_path)
    listing = {entry.code: entry for entry in pipeline.languages()}
    tsn = listing["tsn"]
    assert tsn.supported and tsn.family == "words" and tsn.model == "tswana-words" and tsn.licence
    assert listing["eng"].family == "whisper"
    assert "words (a test family)" in pipeline.models.backend()

    stray = tmp_path / "notes"
    stray.mkdir()
    (stray / "README.md").write_text("not a model")
    routed = settings.speech.model_copy(update={"language_models": {"xho": str(stray)}})
    with pytest.raises(Unavailable) as refused:
        _ = TranscriptionPipeline(routed, settings.data_dir).models
    for family in families.FAMILIES:
        assert f"{family.name}: {family.accepts}" in refused.value.detail
    families.unregister(word_family)  # without the family, its directory is no model
    with pytest.raises(Unavailable, match="not a model of any speech family"):
        _ = _pipeline(settings, tmp_path / "again").models

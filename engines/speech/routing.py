"""Every speech model of a pipeline, by language: Whisper and the CTC family side by side.

``speech.language_models`` (``KHULUMA_SPEECH_LANGUAGE_MODELS``) maps a language to a model; :func:`resolve`
tells each value's family from its files (a registered name, a directory, or a Hugging Face id Whisper can load
from its cache):

- a CTC model (``engines.speech.ctc``: sherpa-onnx's ONNX layout, or a wav2vec2 / MMS / w2v-BERT checkpoint);
- a faster-whisper (CTranslate2) Whisper model, added to ``whisper.language_models`` (Whisper's own map).

:class:`SpeechModels` answers the pipeline's calls the same way for both: a route (``Route.family``) says which
model decodes, and Whisper keeps what only it does (the VAD, spoken-language detection on its 99 languages, the
beam-searched exact decode of a live segment). A CTC model decodes a live partial and a committed segment alike
(one forward pass over the speech: no beam, no prefix), and its segments are screened by its own guards
(``engines.speech.ctc_guards``), never Whisper's.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contracts import languages
from contracts.errors import Unavailable, UnsupportedLanguage
from contracts.installs import MODEL_SETTING, install_hint
from contracts.languages import CODE_SWITCHED_ZULU, TRANSCRIPTION_CODES, transcription_code
from engines.models.catalogue import catalogued
from engines.models.registry import ModelError, ModelRegistry, model_format
from engines.speech import ctc_guards, guards
from engines.speech.ctc import CTCRecognizer
from engines.speech.recognition import CTC, Detection, Heard, Route, SpeechSegment
from engines.speech.whisper import SETTING as WHISPER_SETTING
from engines.speech.whisper import WhisperRecognizer
from engines.speech.whisper_adapter import Languages

log = logging.getLogger(__name__)

SETTING = MODEL_SETTING["speech"]  # KHULUMA_SPEECH_LANGUAGE_MODELS


@dataclass(frozen=True)
class CTCModel:
    """A CTC model a language is routed to: the recognizer, and what the catalogue knows of it."""

    recognizer: CTCRecognizer
    source: str  # the Hugging Face id or directory it came from
    licence: str | None = None  # None: not stated (a local directory outside the catalogue)
    published: str = ""  # its publisher's figures, as the catalogue words them


def resolve(refs: dict[str, str], data_dir: Path, cpu_threads: int = 0) -> tuple[dict[str, CTCModel], dict[str, str]]:
    """``speech.language_models`` split by family: ``(CTC models by code, Whisper model refs by code)``. A CTC
    directory shared by several languages (an MMS model with adapters, Omnilingual) is loaded once."""
    registry = ModelRegistry(data_dir)
    ctc: dict[str, CTCModel] = {}
    whisper: dict[str, str] = {}
    loaded: dict[Path, CTCModel] = {}
    for language, ref in refs.items():
        code = transcription_code(language)
        path, source = _located(registry, ref)
        if path is None or model_format(path) == "ctranslate2":  # a Whisper model (CTranslate2), or a hub id
            whisper[code] = str(path) if path is not None else ref
            continue
        # any other directory must be a CTC model: CTCRecognizer says what it lacks when it is not
        model = loaded.get(path.resolve())
        if model is None:
            known = catalogued(source)
            try:
                recognizer = CTCRecognizer(path, cpu_threads=cpu_threads, name=Path(ref).name if "/" in ref else ref)
            except Unavailable as exc:
                raise Unavailable(f"The speech model routed to '{code}' in {SETTING}: {exc.detail}") from None
            licence = known.licence if known else None
            model = loaded[path.resolve()] = CTCModel(recognizer, source, licence, known.published if known else "")
        ctc[code] = model
    return ctc, whisper


def _located(registry: ModelRegistry, ref: str) -> tuple[Path | None, str]:
    """The directory a setting's value names (a registered model, or a directory) and where it came from."""
    try:
        entry = registry.get(ref)
    except ModelError:
        entry = None
    if entry is not None:
        return Path(entry.path), entry.source
    path = Path(ref).expanduser()
    if path.is_dir():
        return path, str(path.resolve())
    return None, ref


class SpeechModels:
    """The pipeline's view of its speech models: Whisper (``whisper``) and the CTC models by language (``ctc``)."""

    def __init__(self, whisper: WhisperRecognizer, ctc: dict[str, CTCModel] | None = None) -> None:
        self.whisper = whisper
        self.ctc = dict(ctc or {})

    # ------------------------------------------------------------------ languages

    def routes(self) -> dict[str, Route]:
        """Every language code that has a model, with how it is transcribed (a CTC route where both families have
        one: the operator routed it so)."""
        out = self.whisper.routes()
        for code, model in self.ctc.items():
            out[code] = Route(code, f"ctc:{code}", model.recognizer.name, None, CTC)
        if CODE_SWITCHED_ZULU not in self.ctc and "zul" in self.ctc:  # code-switched isiZulu on the isiZulu model
            out[CODE_SWITCHED_ZULU] = Route(CODE_SWITCHED_ZULU, "ctc:zul", self.ctc["zul"].recognizer.name, None, CTC)
        return out

    def route(self, requested: str) -> Route:
        """The route for a requested language code (any accepted spelling), or :class:`UnsupportedLanguage`: unknown
        (``unknown=True``), or known without a model here, naming the setting and the command that add one."""
        code = transcription_code(requested)
        routes = self.routes()
        if code in routes:
            return routes[code]
        available = ", ".join(sorted(routes))
        if code in TRANSCRIPTION_CODES or code in languages.LANGUAGES:
            target = "zul" if code == CODE_SWITCHED_ZULU else code
            raise UnsupportedLanguage(
                code,
                f"({languages.speech_name(code)}) has no speech model on this server: Whisper has no "
                f"{languages.speech_name(target)}. An operator can add one: {install_hint('speech')}; or any model "
                f'directory with {SETTING}=\'{{"{target}": "<model directory or registered name>"}}\' (a CTC model, '
                f"or a faster-whisper model fine-tuned for it: {WHISPER_SETTING}). Languages available now: "
                f"{available}.",
            )
        raise UnsupportedLanguage(
            requested,
            f"Accepted codes: {', '.join(sorted(set(TRANSCRIPTION_CODES) | set(routes)))} (available on this server: "
            f"{available}).",
            unknown=True,
        )

    def model_of(self, route: Route) -> CTCModel:
        return self.ctc[route.code if route.code in self.ctc else "zul"]

    # ------------------------------------------------------------------ Whisper's own

    def detect(self, speech: np.ndarray) -> Detection | None:
        return self.whisper.detect(speech)

    def detect_short(self, speech: np.ndarray) -> Detection | None:
        return self.whisper.detect_short(speech)

    def first_look(self, speech: np.ndarray) -> tuple[Detection | None, str, float]:
        return self.whisper.first_look(speech)

    def whisper_token(self, code: str) -> str | None:
        """Whisper's own language token for ``code``'s route (None: no route, or one Whisper has no token for)."""
        route = self.routes().get(code)
        return route.whisper_language if route else None

    def detection_of(self, heard: Languages) -> Detection | None:
        return self.whisper.detection_of(heard)

    def detectable(self) -> dict[str, str]:
        return self.whisper.detectable()

    def speech_chunks(self, audio: np.ndarray, **options: Any) -> list[dict[str, int]]:
        return self.whisper.speech_chunks(audio, **options)

    # ------------------------------------------------------------------ decoding, by family

    def transcribe(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[dict[str, int]],
        *,
        offset: float = 0.0,
        deadline: float | None = None,
    ) -> Iterator[SpeechSegment]:
        """Segments of the speech ``chunks`` of ``audio``, by ``route``'s model."""
        if route.family == CTC:
            recognizer = self.model_of(route).recognizer
            yield from recognizer.transcribe(
                audio, chunks, language=_model_language(recognizer, route), offset=offset, deadline=deadline
            )
            return
        yield from self.whisper.transcribe(audio, route, chunks, offset=offset, deadline=deadline)

    def exact_segments(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[dict[str, int]],
        *,
        offset: float = 0.0,
        heard: list[dict[str, int]] | None = None,
        heard_text: str = "",
        detect: bool = False,
    ) -> Heard:
        """A live stream's committed speech (Whisper: ``WhisperRecognizer.exact_segments``; CTC: its one pass)."""
        if route.family == CTC:
            return self._ctc_heard(audio, route, chunks, offset, detect)
        return self.whisper.exact_segments(
            audio, route, chunks, offset=offset, heard=heard, heard_text=heard_text, detect=detect
        )

    def quick_segments(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[dict[str, int]],
        *,
        offset: float = 0.0,
        detect: bool = False,
    ) -> Heard:
        """A live stream's partial (Whisper: greedy and unpadded; CTC: the same pass as a committed segment)."""
        if route.family == CTC:
            return self._ctc_heard(audio, route, chunks, offset, detect)
        return self.whisper.quick_segments(audio, route, chunks, offset=offset, detect=detect)

    def _ctc_heard(
        self, audio: np.ndarray, route: Route, chunks: list[dict[str, int]], offset: float, detect: bool
    ) -> Heard:
        if not chunks:
            return Heard([])
        speech = np.concatenate([audio[c["start"] : c["end"]] for c in chunks])
        segments = list(self.transcribe(audio, route, chunks, offset=offset))
        return Heard(segments, self.whisper.detect_short(speech) if detect else None, speech.size / 16_000)

    def quick_transcript(self, speech: np.ndarray, route: Route) -> tuple[str, float]:
        """A cheap look at what ``route``'s model makes of ``speech``: its text and mean log-probability."""
        if route.family == CTC:
            recognizer = self.model_of(route).recognizer
            return recognizer.quick_transcript(speech, language=_model_language(recognizer, route))
        return self.whisper.quick_transcript(speech, route)

    def screen(self, route: Route, segments: list[SpeechSegment]) -> tuple[list[SpeechSegment], list[str]]:
        """The family's guards over ``segments``: what passes, and one warning per kind of problem."""
        if route.family == CTC:
            return ctc_guards.screen(segments)
        return guards.screen([undoubled(s) for s in segments])

    # ------------------------------------------------------------------ models

    def warm_up(self) -> None:
        """Load every model now (a deployment's start), so that no request waits for one."""
        for model in {id(m): m for m in self.ctc.values()}.values():
            model.recognizer.load()

    def language_blind(self, route: Route) -> bool:
        """Whether ``route``'s model transcribes without being told the language (Omnilingual CTC): one transcript
        of some speech serves every language routed to it."""
        return route.family == CTC and self.model_of(route).recognizer.agnostic

    def agnostic(self) -> CTCRecognizer | None:
        """A configured CTC model that transcribes any language (Omnilingual), if one is."""
        return next((m.recognizer for m in self.ctc.values() if m.recognizer.agnostic), None)


def _model_language(recognizer: CTCRecognizer, route: Route) -> str | None:
    """The language a CTC model is asked for: none for a language-agnostic one (Omnilingual), the route's code for
    an adapter model or a fine-tune (code-switched isiZulu runs on isiZulu)."""
    if recognizer.agnostic:
        return None
    return "zul" if route.code == CODE_SWITCHED_ZULU else route.code


def undoubled(segment: SpeechSegment) -> SpeechSegment:
    """``segment`` without the second copy of a passage said twice in a row (``guards.doubled``); as it is when its
    words do not match its text one to one (a cut would lose their times)."""
    half = guards.doubled(segment.text)
    if half is None or (segment.words and len(segment.words) != 2 * half):
        return segment
    words = segment.words[:half]
    end = words[-1].end if words else segment.start + (segment.end - segment.start) / 2
    return dataclasses.replace(segment, text=" ".join(segment.text.split()[:half]), words=words, end=end)

"""Every speech model of a pipeline, by language: the recognizers the families built
(``engines.speech.families``), and the language detector.

:class:`SpeechModels` routes a language to the recognizer that serves it (``Route.recognizer``; where two families
serve a language, the later family's route: the operator routed it so), refuses a language without a model, and
gives a live decode the detector's evidence where its recognizer cannot say which language it heard
(``Recognizer.detects_language``). Everything else the pipeline asks of a route's recognizer directly.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from contracts import languages
from contracts.errors import UnsupportedLanguage
from contracts.installs import MODEL_SETTING, install_hint
from contracts.languages import CODE_SWITCHED_ZULU, TRANSCRIPTION_CODES, transcription_code
from contracts.settings import SpeechSettings
from engines.speech.families import resolve
from engines.speech.recognition import Chunk, FamilySettings, Heard, LanguageDetector, Recognizer, Route

SETTING = MODEL_SETTING["speech"]  # KHULUMA_SPEECH_LANGUAGE_MODELS
SAMPLE_RATE = 16_000


class SpeechModels:
    """The pipeline's view of its speech models: ``recognizers`` in the families' order, and the first one's
    language detector (``detector``)."""

    def __init__(self, recognizers: Sequence[Recognizer]) -> None:
        self.recognizers = list(recognizers)
        detector = next((r.detector for r in self.recognizers if r.detector is not None), None)
        if detector is None:
            raise ValueError("no speech-model family of this pipeline has a language detector")
        self.detector: LanguageDetector = detector

    @property
    def model_name(self) -> str:
        """The default model's name (the detector's)."""
        return self.detector.model_name

    # ------------------------------------------------------------------ languages

    def routes(self) -> dict[str, Route]:
        """Every language code that has a model, with how it is transcribed."""
        out: dict[str, Route] = {}
        for recognizer in self.recognizers:
            out.update(recognizer.routes())
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
                "or a faster-whisper model fine-tuned for it). Languages available now: "
                f"{available}.",
            )
        raise UnsupportedLanguage(
            requested,
            f"Accepted codes: {', '.join(sorted(set(TRANSCRIPTION_CODES) | set(routes)))} (available on this server: "
            f"{available}).",
            unknown=True,
        )

    def language_token(self, code: str) -> str | None:
        """The language token of ``code``'s route (None: no route, or one told no token)."""
        route = self.routes().get(code)
        return route.language_token if route else None

    # ------------------------------------------------------------------ a live step's decodes

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
        """A live stream's committed speech, by ``route``'s recognizer (``Recognizer.exact_segments``)."""
        decoded = route.recognizer.exact_segments(
            audio, route, chunks, offset=offset, heard=heard, heard_text=heard_text, detect=detect
        )
        return self._detected(decoded, route, audio, chunks, detect)

    def quick_segments(
        self, audio: np.ndarray, route: Route, chunks: list[Chunk], *, offset: float = 0.0, detect: bool = False
    ) -> Heard:
        """A live stream's partial, by ``route``'s recognizer (``Recognizer.quick_segments``)."""
        decoded = route.recognizer.quick_segments(audio, route, chunks, offset=offset, detect=detect)
        return self._detected(decoded, route, audio, chunks, detect)

    def _detected(self, decoded: Heard, route: Route, audio: np.ndarray, chunks: list[Chunk], detect: bool) -> Heard:
        """``decoded`` with the detector's languages of its speech, where they were asked for and its recognizer
        cannot say them."""
        if detect and chunks and not route.recognizer.detects_language:
            speech = np.concatenate([audio[c["start"] : c["end"]] for c in chunks])
            decoded.detection = self.detector.detect_short(speech)
        return decoded

    # ------------------------------------------------------------------ models

    @property
    def batching(self) -> bool:
        """Whether a recognizer decodes concurrent requests' windows in shared batches."""
        return any(r.batching for r in self.recognizers)

    def backend(self) -> str:
        """What runs the models, for ``/api/v1/models``."""
        return "; ".join(b for r in self.recognizers if (b := r.backend()))

    def warm_up(self) -> None:
        """Load every model a first request would wait for (a deployment's start)."""
        for recognizer in self.recognizers:
            recognizer.warm_up()


_models: dict[tuple[str, ...], SpeechModels] = {}
_lock = threading.Lock()


def shared_models(speech: SpeechSettings, data_dir: Path) -> SpeechModels:
    """One :class:`SpeechModels` per process and model configuration: pipelines that differ only in their limits
    share the loaded models."""
    key = (str(data_dir), speech.models_key())
    with _lock:
        models = _models.get(key)
        if models is None:
            models = _models[key] = SpeechModels(resolve(FamilySettings(speech, Path(data_dir))))
    return models

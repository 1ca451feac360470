"""The speech pipeline: :class:`TranscriptionPipeline` composes what speech does with one process's speech models.

- a file (:meth:`~TranscriptionPipeline.transcribe`): ``engines.speech.file_transcription``;
- a live step (:meth:`~TranscriptionPipeline.live_step`; over a decoded buffer, ``pipeline.live.step_audio``):
  ``engines.speech.live_step``;
- the per-language truth of ``/api/v1/models`` (:meth:`~TranscriptionPipeline.languages`):
  ``engines.speech.listing``.

Its speech models (``engines.speech.routing.SpeechModels``: the recognizers the families built from the settings,
``engines.speech.families``) are built on first use and loaded lazily; its language decisions are
``engines.speech.language_choice``'s; its speech is found by the VAD (``engines.speech.vad``). It is plain Python
(no Ray, no HTTP, no global settings: it is handed the ``speech`` section): the
Speech deployment and the batch Ray tasks call it; :func:`get_pipeline` keeps one per process and settings, and
pipelines that differ only in their limits share their models (``routing.shared_models``), so models load once per
process.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from contracts.capabilities import LanguageSupport
from contracts.settings import SpeechSettings
from contracts.speech import StreamRequest, StreamStep, TranscriptionResult
from engines.speech import listing
from engines.speech.audio import SAMPLE_RATE
from engines.speech.file_transcription import FileTranscription
from engines.speech.language_choice import LanguageChoice
from engines.speech.live_step import LiveSteps
from engines.speech.routing import SpeechModels, shared_models
from engines.speech.vad import Vad, speech_chunks


class TranscriptionPipeline:
    """Files, live steps and the language listing over one set of speech models; thread-safe, one per process is
    enough. ``models``: speech models to share (another pipeline's); ``vad``: what finds speech."""

    def __init__(
        self,
        speech: SpeechSettings,
        data_dir: Path,
        *,
        models: SpeechModels | None = None,
        vad: Vad = speech_chunks,
    ) -> None:
        self.speech = speech
        self.whisper = speech.whisper
        self.data_dir = Path(data_dir)  # where the default Whisper weights are unpacked
        self.served_floor = speech.served_language_floor
        self._models = models
        self._lock = threading.Lock()
        self.choice = LanguageChoice(lambda: self.models, speech)
        self.files = FileTranscription(self.choice, speech, vad)
        self.live = LiveSteps(self.choice, speech, vad)

    @property
    def models(self) -> SpeechModels:
        """Every speech model, by language (``engines.speech.routing``); built on first use, loaded lazily."""
        if self._models is None:
            with self._lock:
                if self._models is None:
                    self._models = shared_models(self.speech, self.data_dir)
        return self._models

    @property
    def model_name(self) -> str:
        """The default model's name."""
        return self.models.model_name

    def warm_up(self) -> None:
        """Load every model a first request or stream would wait for (deployments call this at start)."""
        self.models.warm_up()
        # a live stream's first look runs on an encoding of its own length: its first call sets up the decoder
        noise = np.random.default_rng(0).normal(0, 0.05, 2 * SAMPLE_RATE).astype(np.float32)
        self.live.first_language.evidence(noise)

    def languages(self) -> list[LanguageSupport]:
        """Per-language truth for ``GET /api/v1/models`` (``engines.speech.listing``)."""
        return listing.languages(self.models)

    def transcribe(
        self,
        path: Path | str,
        language: str | None = None,
        diarise: bool = False,
        detect_music: bool = False,
        *,
        timeout_s: float | None = None,
    ) -> TranscriptionResult:
        """What transcribing the file at ``path`` produced (``FileTranscription.transcribe``)."""
        return self.files.transcribe(path, language, diarise, detect_music, timeout_s=timeout_s)

    def live_step(self, request: StreamRequest) -> StreamStep:
        """One live step as the live routes send it (``LiveSteps.step``)."""
        return self.live.step(request)


_pipelines: dict[tuple[str, ...], TranscriptionPipeline] = {}
_cache_lock = threading.Lock()


def get_pipeline(speech: SpeechSettings, data_dir: Path) -> TranscriptionPipeline:
    """One pipeline per process and settings (what Ray tasks and deployments use), keyed by the settings
    themselves; its models are ``routing.shared_models``."""
    key = (str(data_dir), speech.model_dump_json())
    with _cache_lock:
        pipeline = _pipelines.get(key)
        if pipeline is None:
            pipeline = _pipelines[key] = TranscriptionPipeline(speech, data_dir)
    return pipeline

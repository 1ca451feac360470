"""Speech deployment: the speech models of every family (Whisper, CTC: ``engines.speech.families``) routed per
language, through :class:`engines.speech.pipeline.TranscriptionPipeline`.

Audio arrives as bytes (``contracts.payloads.Blob``: inline when small, else an object in the service's object
storage), never as a path: on a cluster the ingress and the replicas share no disk. The replica turns the bytes
into a private temporary file for the decoder (``cluster.transfer.materialise``) and deletes it when done. Work
runs in worker threads; a Whisper model runs ``speech.whisper_parallel_decodes`` decodes at once (one per core on CPU)
and queues the rest, so memory grows with the cores, not with the requests. Once the replica has been idle for
``IDLE_TRIM_SECONDS``, the decoders' freed buffers go back to the OS (docs/performance.md, idle memory). Every
model the settings name (``speech.language_models``) is loaded when the replica starts.

``user_config`` (Serve) / :meth:`reconfigure`: ``{"model": ..., "language_models": {...}}`` swaps the default
Whisper model and the per-language map (any family, as ``speech.language_models``) without a restart (the new
pipeline is loaded before it is swapped in).

The deployment trusts its typed input (the service checked limits); language errors leave here without a request
field name (the service adds it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cluster.transfer import materialise
from contracts.capabilities import CapabilityInfo
from contracts.errors import DomainError
from contracts.installs import TRANSLATION_NOT_INSTALLED
from contracts.languages import nllb_code
from contracts.speech import StreamRequest, StreamStep, TranscribeRequest, TranscriptionResult
from contracts.translation import TranslationClient, TranslationRequest
from deployments.common import configure_replica_logging, load_settings
from engines.speech.pipeline import TranscriptionPipeline, get_pipeline
from engines.speech.routing import SETTING
from runtime.memory import IdleTrim, release_freed_memory
from runtime.metrics import model_timer

log = logging.getLogger(__name__)

_NOTE = (
    f"Whisper base covers afr, eng, fra; isiZulu, isiXhosa, Sepedi, Setswana, Xitsonga and Sesotho need a model "
    f"routed to them in {SETTING} (a CTC model: `khuluma models pull omnilingual-ctc-300m`; docs/speech.md). "
    f"Auto-detection refuses audio most likely in a language without a model (400, naming the setting) instead "
    f"of answering a wrong language: on real recordings it refused 33 of 35 isiZulu clips (the other 2 carried a "
    f"warning) and refused none of 64 English, Afrikaans and French ones (docs/speech.md). Segments that fail the "
    f"hallucination guards are left out with a warning. diarisation available; music-on-hold detection available. "
    f"Translation of transcripts to English uses the translation capability when a model is installed."
)


BATCHING_THREADS = 32  # at least the deployment's max_ongoing_requests (16 by default, serve.yaml)
IDLE_TRIM_SECONDS = 5.0  # well past the pause between a live stream's steps (one every 2 s of audio)


class Speech:
    def __init__(self, settings: dict[str, Any] | None = None, translation: Any = None) -> None:
        self.settings = load_settings(settings)
        configure_replica_logging("Speech", self.settings)
        self.translation = TranslationClient(translation) if translation is not None else None
        self.pipeline: TranscriptionPipeline = get_pipeline(self.settings.speech, self.settings.data_dir)
        self.pipeline.warm_up()
        self.user_config: dict[str, Any] = {}
        self._reload = asyncio.Lock()
        # Batching: a thread per request the replica admits, so requests wait in the batcher, where their windows
        # can share a batch, not in front of a thread pool. Without it, asyncio's default size (cores + 4): every
        # running request holds its decoded audio, and the model decodes at most parallel_decodes at once anyway.
        threads = BATCHING_THREADS if self.pipeline.models.batching else min(32, (os.cpu_count() or 1) + 4)
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="transcribe")
        self._idle = IdleTrim(IDLE_TRIM_SECONDS)
        # what loading and the warm-up's decode freed goes back to the system now, not after a first request
        release_freed_memory()

    # ------------------------------------------------------------------ lifecycle

    def ping(self) -> bool:
        return True

    async def reconfigure(self, config: dict[str, Any] | None) -> None:
        """``model``: default Whisper model (null: the setting); ``language_models``: code -> model of any family,
        added to the ``KHULUMA_SPEECH_LANGUAGE_MODELS`` setting."""
        config = dict(config or {})
        base = self.settings.speech
        # entries add to (or override) the setting's map; an empty map keeps the setting's languages
        speech = base.model_copy(
            update={
                "whisper_model": config.get("model") or base.whisper_model,
                "language_models": {**base.language_models, **dict(config.get("language_models") or {})},
            }
        )
        async with self._reload:
            if speech == self.pipeline.speech:
                self.user_config = config
                return
            pipeline = get_pipeline(speech, self.settings.data_dir)
            await asyncio.to_thread(pipeline.warm_up)  # the old pipeline serves until the new one is ready
            self.pipeline, self.user_config = pipeline, config
            log.info(
                "transcription reconfigured: model=%s language_models=%s", pipeline.model_name, speech.language_models
            )

    def describe(self) -> list[CapabilityInfo]:
        pipeline = self.pipeline
        return [
            CapabilityInfo(
                capability="transcription",
                installed=True,
                model=pipeline.model_name,
                backend=pipeline.models.backend(),
                languages=pipeline.languages(),
                note=_NOTE,
            )
        ]

    # ------------------------------------------------------------------ requests

    async def transcribe(self, request: TranscribeRequest) -> TranscriptionResult:
        """What transcribing the request's audio produced; ``translate`` adds an English ``translation``
        (or a warning when no translation model is installed)."""
        result = await self._idle.run(self._threads, self._transcribe_file, request)
        if request.translate:
            await self._translate(result)
        return result

    def _transcribe_file(self, request: TranscribeRequest) -> TranscriptionResult:
        # the bytes become a file private to this replica for the decoder, and go when it is done
        with (
            model_timer("Speech.transcribe"),
            materialise(self.settings.s3, request.audio, request.file_name) as path,
        ):
            return self.pipeline.transcribe(
                path, request.language, request.diarise, request.detect_music, timeout_s=request.timeout_s
            )

    def check_language(self, code: str) -> str:
        """The normalised code, or UnsupportedLanguage when it is unknown or has no model (no audio needed)."""
        return self.pipeline.models.route(code).code

    async def live_step(self, request: StreamRequest) -> StreamStep:
        """A live step: PCM16LE mono bytes at ``request.sample_rate`` -> final and pending segments (see
        ``engines.speech.live_step``), off the event loop."""
        step = functools.partial(self.pipeline.live_step, request)
        return await self._idle.run(self._threads, step)

    async def _translate(self, result: TranscriptionResult) -> None:
        text, language, warnings = result.text, result.language_code, result.warnings
        if not text:
            return
        if language == "eng":
            result.translation = text
            return
        if self.translation is None:
            why = "the translation capability is not deployed."
            if not self.settings.translation.model:  # not deployed because no model is set: as it would answer
                why = TRANSLATION_NOT_INSTALLED
            warnings.append(f"Translation to English is not available: {why}")
            return
        source = nllb_code(language)
        if source is None:
            warnings.append(f"Translation to English is not available for language '{language}'.")
            return
        try:
            result.translation = await self.translation.translate(
                TranslationRequest(text=text, source=source, target="eng_Latn")
            )
        except DomainError as exc:
            warnings.append(f"Translation to English is not available: {exc.detail}")
        except Exception as exc:  # noqa: BLE001 - the transcript stands without its translation
            log.warning("translation of a transcript failed: %s", exc)
            warnings.append(f"Translation to English failed: {type(exc).__name__}.")

"""Transcription deployment: faster-whisper through :class:`engines.pipeline.TranscriptionPipeline`.

Files travel by path: the ingress saves uploads under ``<data_dir>/uploads`` on a disk every replica shares (one
machine, or a shared volume on a cluster), so audio is never pickled through Ray. Work runs in worker threads;
CTranslate2 decodes one batch at a time per model, so concurrent requests queue inside the model rather than
multiplying memory.

``user_config`` (Serve) / :meth:`reconfigure`: ``{"model": ..., "language_models": {...}}`` swaps the default
Whisper model and the per-language map without a restart (the new pipeline is loaded before it is swapped in).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from pathlib import Path
from typing import Any

import numpy as np

from deployments.common import load_settings
from engines.asr import SETTING
from engines.audio import load_pcm16
from engines.pipeline import TranscriptionPipeline, get_pipeline
from serve_app.backends import as_backend
from contracts.errors import DomainError

log = logging.getLogger("khuluma.transcription")

# transcription code -> NLLB code for translation to English
NLLB_CODES = {"afr": "afr_Latn", "zul": "zul_Latn", "cs-zul": "zul_Latn", "sot": "sot_Latn", "fra": "fra_Latn",
              "xho": "xho_Latn", "nso": "nso_Latn", "tsn": "tsn_Latn", "tso": "tso_Latn", "ssw": "ssw_Latn",
              "swh": "swh_Latn", "sna": "sna_Latn"}


class Transcription:
    def __init__(self, settings: dict[str, Any] | None = None, text: Any = None, translation: Any = None) -> None:
        self.settings = load_settings(settings)
        self.text = as_backend(text, "text")
        self.translation = as_backend(translation, "translation")
        self.pipeline: TranscriptionPipeline = get_pipeline(self.settings)
        self.pipeline.warm_up()
        self.user_config: dict[str, Any] = {}
        self._reload = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle

    def ping(self) -> bool:
        return True

    async def reconfigure(self, config: dict[str, Any] | None) -> None:
        """``model``: default Whisper model (null: the setting); ``language_models``: code -> model, added to
        the ``whisper_language_models`` setting."""
        config = dict(config or {})
        settings = self.settings.model_copy(update={
            "whisper_model": config.get("model") or self.settings.whisper.model,
            # entries add to (or override) the setting's map; an empty map keeps the setting's languages
            "whisper_language_models": {**self.settings.whisper.language_models,
                                        **dict(config.get("language_models") or {})},
        })
        async with self._reload:
            if settings == self.pipeline.settings:
                self.user_config = config
                return
            pipeline = get_pipeline(settings)
            await asyncio.to_thread(pipeline.warm_up)  # the old pipeline serves until the new one is ready
            self.pipeline, self.user_config = pipeline, config
            log.info("transcription reconfigured: model=%s language_models=%s", pipeline.model_name,
                     settings.whisper.language_models)

    def describe(self) -> list[dict[str, Any]]:
        pipeline = self.pipeline
        recognizer = pipeline.recognizer
        extras = []
        for module, what in (("engines.diarise", "diarisation"), ("engines.music", "music-on-hold detection")):
            extras.append(f"{what} {'available' if importlib.util.find_spec(module) else 'not available'}")
        return [{
            "capability": "transcription",
            "installed": True,
            "model": pipeline.model_name,
            "backend": f"faster-whisper (CTranslate2 {recognizer.compute_type}, {recognizer.device})",
            "languages": pipeline.languages(),
            "note": f"Whisper base covers afr, eng, fra; isiZulu and Sesotho need models configured in {SETTING}. "
                    f"Auto-detection chooses among the languages that have a model. {'; '.join(extras)}. "
                    f"Translation of transcripts to English uses the translation capability when a model is "
                    f"installed.",
        }]

    # ------------------------------------------------------------------ requests

    async def transcribe(self, path: str | Path, lang_code: str | None = None, diarise: bool = False,
                         detect_music: bool = False, translate: bool = False,
                         timeout_s: float | None = None) -> dict[str, Any]:
        """The transcription record of the file at ``path`` (see ``engines.pipeline``); ``translate`` adds an
        English ``translation`` (or a warning when no translation model is installed)."""
        pipeline = self.pipeline
        record = await asyncio.to_thread(pipeline.transcribe, Path(path), lang_code, diarise, detect_music,
                                         None, timeout_s=timeout_s)
        if translate:
            await self._translate(record)
        return record

    async def transcribe_bytes(self, data: bytes, suffix: str = "", **options: Any) -> dict[str, Any]:
        """Same as :meth:`transcribe` for bytes (callers without the shared disk); written to a temp file."""
        import tempfile

        uploads = self.settings.data_dir / "uploads"
        uploads.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=uploads, prefix="bytes-", suffix=suffix) as tmp:
            tmp.write(data)
            tmp.flush()
            return await self.transcribe(tmp.name, **options)

    def check_language(self, lang_code: str) -> str:
        """The normalised code, or 400 when it is unknown or has no model (no audio needed)."""
        return self.pipeline.recognizer.route(lang_code).code

    async def transcribe_pcm(self, pcm: bytes, lang_code: str | None = None, offset: float = 0.0,
                             commit_before: float | None = None) -> dict[str, Any]:
        """Streaming step: 16 kHz PCM16LE mono bytes -> final and pending segments (see
        ``TranscriptionPipeline.transcribe_array``)."""
        audio = load_pcm16(pcm)
        if audio.size == 0:
            return {"language_code": lang_code or "", "cut_seconds": 0.0, "final": [], "pending": [],
                    "pending_text": "", "language_probability": None}
        return await asyncio.to_thread(self.pipeline.transcribe_array, np.ascontiguousarray(audio), lang_code,
                                       offset=offset, commit_before=commit_before)

    async def _translate(self, record: dict[str, Any]) -> None:
        text, language = record.get("transcription_text") or "", record.get("language_code") or ""
        warnings = record.setdefault("warnings", [])
        if not text:
            return
        if language == "eng":
            record["translation"] = text
            return
        if self.translation is None:
            warnings.append("Translation to English is not available: the translation capability is not deployed.")
            return
        source = NLLB_CODES.get(language)
        if source is None:
            warnings.append(f"Translation to English is not available for language '{language}'.")
            return
        try:
            record["translation"] = await self.translation.translate(text, source, "eng_Latn")
        except DomainError as exc:
            warnings.append(f"Translation to English is not available: {exc.detail}")
        except Exception as exc:  # noqa: BLE001 - the transcript stands without its translation
            log.warning("translation of a transcript failed: %s", exc)
            warnings.append(f"Translation to English failed: {type(exc).__name__}.")

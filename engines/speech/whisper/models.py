"""Whisper's loaded models: the default model and the per-language ones, each loaded once, on first use, and shared
by every thread of the process.

``KHULUMA_SPEECH_LANGUAGE_MODELS`` (``WhisperSettings.language_models``, and the Whisper models routed in
``KHULUMA_SPEECH_LANGUAGE_MODELS``) maps a code to a faster-whisper model (CTranslate2 directory, or a Hugging Face
id / size name that faster-whisper can load from its cache: nothing is downloaded here when offline). Any code may
be configured (e.g. ``xho``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

from contracts.errors import Unavailable
from contracts.languages import transcription_code
from engines.speech.whisper.languages import DEFAULT_MODEL, SETTING

log = logging.getLogger(__name__)


class Loading(TypedDict, total=False):
    """How :class:`WhisperModels` loads and runs its models (its keyword arguments)."""

    default_model_name: str
    device: str
    compute_type: str
    cpu_threads: int
    parallel_decodes: int
    download_root: Path | None
    live_threads: int
    live_decodes: int


class WhisperModels:
    """Whisper models by key (:data:`DEFAULT_MODEL` or a configured code); thread-safe (a model runs
    ``parallel_decodes`` decodes at once, each on ``cpu_threads`` threads, and queues the rest). Where
    ``live_threads`` is set and differs from ``cpu_threads``, a live stream's steps run on a second instance of the
    same weights, ``live_decodes`` decodes at once of ``live_threads`` threads (:meth:`live_model`): a step's short
    window is mostly small decoder steps, which one thread runs faster than two, while a 30 s file window is mostly
    encoder, which two threads speed up (docs/speech.md#decodes-side-by-side)."""

    def __init__(
        self,
        default_model: str | Path,
        language_models: dict[str, str] | None = None,
        *,
        default_model_name: str = "whisper-base",
        device: str = "cpu",
        compute_type: str = "int8",
        cpu_threads: int = 0,
        parallel_decodes: int = 1,  # decodes of one model at once (CTranslate2 workers sharing its weights)
        download_root: Path | None = None,  # Hugging Face cache to look in (default: the standard HF cache)
        live_threads: int = 0,  # threads per live step's decode (0: the files' instance and threads)
        live_decodes: int = 1,  # live steps' decodes at once, on their own instance
    ) -> None:
        self.default_ref = str(default_model)
        self.default_name = default_model_name
        self.language_models = {transcription_code(k): str(v) for k, v in (language_models or {}).items() if v}
        self.device = device
        self.compute_type = compute_type
        self.cpu_threads = cpu_threads or (os.cpu_count() or 1)
        self.parallel_decodes = max(1, parallel_decodes)
        own_live = live_threads > 0 and live_threads != self.cpu_threads
        self.live_threads = live_threads if own_live else self.cpu_threads
        self.live_decodes = max(1, live_decodes) if own_live else self.parallel_decodes
        self.download_root = download_root
        self._models: dict[str, Any] = {}
        self._live_models: dict[str, Any] = {}
        self._lock = threading.Lock()

    def model(self, key: str = DEFAULT_MODEL) -> Any:
        """The loaded faster-whisper model for ``key`` (loaded on first use)."""
        return self._get(self._models, key, self.cpu_threads, self.parallel_decodes)

    def live_model(self, key: str = DEFAULT_MODEL) -> Any:
        """The instance a live stream's steps decode on: :meth:`model` itself unless ``live_threads`` asks for
        other threads per decode on CPU (then a second instance of the same weights, loaded on first use)."""
        if self.live_threads == self.cpu_threads:
            return self.model(key)
        return self._get(self._live_models, key, self.live_threads, self.live_decodes)

    def _get(self, loaded: dict[str, Any], key: str, threads: int, decodes: int) -> Any:
        model = loaded.get(key)
        if model is not None:
            return model
        with self._lock:
            model = loaded.get(key)
            if model is None:
                ref = self.default_ref if key == DEFAULT_MODEL else self.language_models[key]
                model = self._load(ref, key, threads, decodes)
                loaded[key] = model
        return model

    def _load(self, ref: str, key: str, threads: int, decodes: int) -> Any:
        from faster_whisper import WhisperModel

        started = time.perf_counter()
        try:
            model = WhisperModel(
                ref,
                device=self.device,
                compute_type=self.compute_type,
                cpu_threads=threads,
                num_workers=decodes,
                download_root=str(self.download_root) if self.download_root else None,
                local_files_only=True,  # never download weights at run time
            )
        except Exception as exc:  # noqa: BLE001 - missing directory, no network for a hub id, bad files
            which = (
                "default Whisper model (KHULUMA_SPEECH_WHISPER_MODEL)"
                if key == DEFAULT_MODEL
                else f"speech model for '{key}' ({SETTING})"
            )
            raise Unavailable(
                f"The {which} '{ref}' could not be loaded: {type(exc).__name__}: {exc}. Point the setting at a "
                f"faster-whisper (CTranslate2) model directory."
            ) from None
        log.info(
            "loaded Whisper model %s for %s (%d decodes of %d threads) in %.1f s",
            ref,
            key,
            decodes,
            threads,
            time.perf_counter() - started,
        )
        return model

    def loaded(self) -> list[str]:
        return list(self._models)

"""Translation deployment: NLLB-200 or MADLAD-400 through CTranslate2 (NLLB also through transformers), batching
concurrent requests.

The model comes from ``user_config: {model: ...}`` (Serve) or the ``translation.model`` setting: a name registered
with ``khuluma models pull|add``, a CTranslate2 directory or a Hugging Face directory. Without one, every request
answers 503 saying exactly how to install one, and ``describe()`` reports translation as not installed.

Hot reload: ``reconfigure`` loads the new model in a worker thread while the old one keeps serving, then swaps
one reference. A batch already running holds its own reference and finishes on the model it started with.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from contracts import languages
from contracts.capabilities import CapabilityInfo
from contracts.errors import ModelMissing, Unavailable
from contracts.installs import TRANSLATION_NOT_INSTALLED
from contracts.translation import (
    DecodedSegment,
    DetailedTranslation,
    TranslationRequest,
    nllb_language,
    not_installed,
)
from deployments.common import configure_replica_logging, load_settings
from deployments.serve_batch import batched
from engines.models.registry import Backend, ModelEntry, ModelError, ModelRegistry
from engines.models.resolve import resolve
from engines.translation.load import load_translator
from engines.translation.translator import DecodeOptions, TranslationOutput, Translator

log = logging.getLogger(__name__)

NOT_INSTALLED = TRANSLATION_NOT_INSTALLED


class Translation:
    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = load_settings(settings)
        configure_replica_logging("Translation", self.settings)
        self.registry = ModelRegistry(self.settings.data_dir)
        self.engine: Translator | None = None
        self.entry: ModelEntry | None = None
        self.model_ref: str | None = None
        self.options = DecodeOptions(
            beam_size=self.settings.translation.beam_size, max_length=self.settings.translation.max_length
        )
        self.load_error: str | None = None
        self._reload_lock = asyncio.Lock()
        self._apply(self.settings.translation.model, self.options)

    # ----------------------------------------------------------------------------------- model loading

    def _load(self, ref: str, options: DecodeOptions) -> tuple[Translator, ModelEntry]:
        s = self.settings
        prefer: Backend = "transformers" if s.translation.backend == "transformers" else "ctranslate2"
        entry = resolve(self.registry, ref, "translation", prefer=prefer)
        try:
            engine = load_translator(
                entry.path,
                entry.backend,
                entry.name,
                options,
                device=s.translation.device,
                compute_type=s.translation.compute_type,
                threads=s.translation.threads,
            )
        except ImportError as exc:
            raise ModelError(
                f"The {entry.backend} backend needs the `transformers` extra "
                f"(pip install 'khuluma[transformers]'): {exc}"
            ) from exc
        except Exception as exc:  # a broken or incompatible directory
            raise ModelError(
                f"Could not load translation model {entry.name} from {entry.path}: {type(exc).__name__}: {exc}"
            ) from exc
        if not engine.languages:
            raise ModelError(
                f"{entry.name} has no language tokens (like zul_Latn or <2zu>); it is neither an NLLB-200 nor a "
                "MADLAD-400 model."
            )
        return engine, entry

    def _apply(self, ref: str | None, options: DecodeOptions) -> None:
        """Load ``ref`` and swap it in; on failure keep what is serving and remember why."""
        if not ref:
            self.engine, self.entry, self.model_ref, self.options, self.load_error = None, None, None, options, None
            return
        try:
            engine, entry = self._load(ref, options)
        except ModelError as exc:
            self.load_error = str(exc)
            log.error("translation model %r not loaded: %s", ref, exc)
            if self.engine is None:
                self.model_ref = ref
            return
        self.engine, self.entry, self.model_ref, self.options, self.load_error = engine, entry, ref, options, None
        log.info(
            "translation model %s (%s, %s) loaded from %s", entry.name, entry.backend, engine.compute_type, entry.path
        )

    async def reconfigure(self, config: dict[str, Any] | None) -> None:
        """Serve ``user_config``: ``model`` (null: the setting), optional ``beam_size`` and ``max_length``."""
        config = dict(config or {})
        ref = config.get("model") or self.settings.translation.model
        options = replace(
            self.options,
            beam_size=int(config.get("beam_size") or self.settings.translation.beam_size),
            max_length=int(config.get("max_length") or self.settings.translation.max_length),
        )
        async with self._reload_lock:
            if ref == self.model_ref and (self.engine is not None or not ref) and self.load_error is None:
                if self.engine is not None:  # same model: new decoding options apply to the next batch
                    self.engine.options = options
                self.options = options
                return
            await asyncio.to_thread(self._apply, ref, options)

    # ----------------------------------------------------------------------------------- requests

    def ping(self) -> bool:
        return True

    def _require_engine(self) -> Translator:
        engine = self.engine
        if engine is None:
            if self.load_error:
                raise Unavailable(f"The translation model could not be loaded: {self.load_error}")
            raise ModelMissing(NOT_INSTALLED)
        return engine

    async def translate(self, request: TranslationRequest) -> str:
        """Translate one text (NLLB codes); concurrent calls are decoded together."""
        return (await self._translate_one(request)).text

    async def translate_detailed(self, request: TranslationRequest) -> DetailedTranslation:
        """Like :meth:`translate`, plus the model and the decoded tokens of every segment (diagnostics)."""
        result = await self._translate_one(request)
        return DetailedTranslation(
            translated_text=result.text,
            model=result.model,
            segments=[DecodedSegment(source=s.source, tokens=s.tokens, text=s.text) for s in result.segments],
        )

    async def _translate_one(self, request: TranslationRequest) -> TranslationOutput:
        # The codes are the API's (checked by the service); whether this model has them is checked here, before
        # the request joins a batch, so a refusal is this request's alone.
        self._require_engine().check_languages(request.source, request.target)
        result = await self._translate_batched((request.text, request.source, request.target))
        if isinstance(result, Exception):
            raise result
        return result

    @batched(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def _translate_batched(self, items: list[tuple[str, str, str]]) -> list[TranslationOutput | Exception]:
        engine = self.engine  # this batch stays on this model even if a reload swaps the reference meanwhile
        if engine is None:
            return [ModelMissing(NOT_INSTALLED) for _ in items]
        # A reload since the check above may have brought a model without some of the languages.
        refusals = [engine.unsupported(src, tgt) for _, src, tgt in items]
        todo = [item for item, refusal in zip(items, refusals, strict=True) if refusal is None]
        outputs = iter(await asyncio.to_thread(engine.translate_batch, todo))  # in request order
        return [refusal or next(outputs) for refusal in refusals]

    # ----------------------------------------------------------------------------------- description

    def describe(self) -> list[CapabilityInfo]:
        engine = self.engine
        codes = languages.TRANSLATION_NLLB_CODES
        if engine is None:
            return [
                not_installed(
                    f"Model {self.model_ref!r} could not be loaded: {self.load_error}"
                    if self.load_error
                    else NOT_INSTALLED
                )
            ]
        entry = self.entry
        note = (
            f"{getattr(engine, 'family', 'NLLB-200')} via {engine.backend} ({engine.device}, {engine.compute_type}), "
            f"beam {engine.options.beam_size}, max {engine.options.max_length} tokens per sentence; "
            f"source: {entry.source if entry else '?'}."
        )
        if self.load_error:
            note += f" The last reload failed and this model kept serving: {self.load_error}"
        return [
            CapabilityInfo(
                capability="translation",
                installed=True,
                model=engine.name,
                backend=engine.backend,
                note=note,
                languages=[
                    nllb_language(
                        code,
                        code in engine.languages,
                        engine.name,
                        None if code in engine.languages else "no language token in this model",
                    )
                    for code in codes
                ],
            )
        ]

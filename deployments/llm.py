"""LLM deployment: the language model of the ask route and the chat completions, behind one typed handle
(``contracts.llm.LLMClient``).

The model comes from ``user_config: {model: ...}`` (Serve) or the ``llm.model`` setting: a name registered with
``khuluma models pull|add``, a CTranslate2 directory or a Hugging Face directory. Two engines:

- ``ctranslate2`` (default): CTranslate2's generator in this replica, int8 on CPU, batching the generations that
  arrive together (``engines/llm/ct2.py``).
- ``vllm``: the app builder deploys Ray Serve LLM's ``LLMServer`` (vLLM, on GPUs) and binds its handle here as
  ``server``; this replica assembles the prompt and streams vLLM's completion (``deployments/llm_vllm.py``).

Either way the replica owns the tokenizer and the chat template: every prompt is assembled here, within the
model's context window (``engines/llm/prompt.py``). Without a model, every call answers 503 naming the setting and
``describe()`` reports the capability as not installed.

Hot reload (CTranslate2): ``reconfigure`` loads the new model in a worker thread while the old one serves, swaps
one reference, then lets the old generator finish what it was asked and frees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from contracts import languages
from contracts.capabilities import CapabilityInfo, LanguageSupport
from contracts.errors import DomainError, ModelMissing, Unavailable
from contracts.installs import LLM_NOT_INSTALLED
from contracts.llm import (
    AnswerSentence,
    Generation,
    GenerationDelta,
    GenerationEnd,
    GenerationEvent,
    GenerationRequest,
    GenerationStart,
    measured,
    not_installed,
)
from deployments.common import configure_replica_logging, load_settings
from engines.llm.ct2 import CT2Generator, Job, SamplingKey
from engines.llm.prompt import GROUNDED_STOPS, Assembled, assemble
from engines.llm.repetition import loop_start
from engines.llm.tokenizer import ChatTokenizer
from engines.models.catalogue import catalogued
from engines.models.registry import ModelEntry, ModelError, ModelRegistry
from engines.models.resolve import resolve
from engines.search.grounding import Checked, Guard

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """A model ready to serve: its registry entry, tokenizer, and the CTranslate2 generator (None with vLLM)."""

    entry: ModelEntry
    tokenizer: ChatTokenizer
    generator: CT2Generator | None
    languages: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.entry.name


class LLM:
    def __init__(self, settings: dict[str, Any] | None = None, server: Any = None) -> None:
        self.settings = load_settings(settings)
        configure_replica_logging("LLM", self.settings)
        self.registry = ModelRegistry(self.settings.data_dir)
        self.server = server  # Ray Serve LLM's LLMServer handle (engine vllm), bound by the app builder
        self.loaded: Loaded | None = None
        self.model_ref: str | None = None
        self.load_error: str | None = None
        self._reload_lock = asyncio.Lock()
        self._apply(self.settings.llm.model)

    # ----------------------------------------------------------------------------------- model loading

    def _load(self, ref: str) -> Loaded:
        s = self.settings.llm
        vllm = s.engine == "vllm"
        entry = resolve(self.registry, ref, "llm", prefer="transformers" if vllm else "ctranslate2")
        if not vllm and entry.backend != "ctranslate2":
            raise ModelError(
                f"{entry.name} is a Hugging Face checkpoint that CTranslate2 could not convert; the ctranslate2 "
                "engine needs a converted model (`khuluma models add <dir> --capability llm`), or set "
                "KHULUMA_LLM_ENGINE=vllm on GPUs."
            )
        if vllm and self.server is None:
            raise ModelError("KHULUMA_LLM_ENGINE=vllm but no LLMServer deployment was bound (khuluma.app builds it).")
        try:
            tokenizer = ChatTokenizer(entry.path, s.context_tokens)
            generator = (
                None
                if vllm
                else CT2Generator(
                    entry.path,
                    tokenizer,
                    device=s.device,
                    compute_type=s.compute_type,
                    threads=s.threads or os.cpu_count() or 1,  # a fractional-CPU replica would get one
                    max_batch_size=s.max_batch_size,
                    batch_wait_s=s.batch_wait_ms / 1000,
                    repetition_penalty=s.repetition_penalty,
                    no_repeat_ngram_size=s.no_repeat_ngram_size,
                )
            )
        except DomainError as exc:
            raise ModelError(exc.detail) from exc
        except Exception as exc:  # a broken or incompatible directory
            raise ModelError(
                f"Could not load language model {entry.name} from {entry.path}: {type(exc).__name__}: {exc}"
            ) from exc
        known = catalogued(entry.source) or catalogued(entry.name)
        return Loaded(entry, tokenizer, generator, s.answer_languages(known.languages if known else ()))

    def _apply(self, ref: str | None) -> None:
        """Load ``ref`` and swap it in; on failure keep what is serving and remember why."""
        old = self.loaded
        if not ref:
            self.loaded, self.model_ref, self.load_error = None, None, None
        else:
            try:
                loaded = self._load(ref)
            except ModelError as exc:
                self.load_error = str(exc)
                log.error("language model %r not loaded: %s", ref, exc)
                if self.loaded is None:
                    self.model_ref = ref
                return
            self.loaded, self.model_ref, self.load_error = loaded, ref, None
            log.info("language model %s loaded from %s (%s)", loaded.name, loaded.entry.path, self._backend(loaded))
        if old is not None and old is not self.loaded and old.generator is not None:
            # what was asked of it finishes on it, off this call (a long queue would hold up the reload)
            threading.Thread(target=old.generator.close, kwargs={"drain": True}, daemon=True).start()

    async def reconfigure(self, config: dict[str, Any] | None) -> None:
        """Serve ``user_config``: ``model`` (null: the setting)."""
        ref = (config or {}).get("model") or self.settings.llm.model
        async with self._reload_lock:
            if ref == self.model_ref and self.load_error is None:
                return
            await asyncio.to_thread(self._apply, ref)

    def __del__(self) -> None:
        loaded = getattr(self, "loaded", None)
        if loaded is not None and loaded.generator is not None:
            with contextlib.suppress(Exception):
                loaded.generator.close()

    # ----------------------------------------------------------------------------------- requests

    def ping(self) -> bool:
        return True

    def _require(self) -> Loaded:
        loaded = self.loaded
        if loaded is None:
            if self.load_error:
                raise Unavailable(f"The language model could not be loaded: {self.load_error}")
            raise ModelMissing(LLM_NOT_INSTALLED)
        return loaded

    async def generate(self, request: GenerationRequest) -> Generation:
        """The whole generation at once (the non-streaming routes)."""
        start: GenerationStart | None = None
        end: GenerationEnd | None = None
        parts: list[str] = []
        async for event in self.stream(request):
            if isinstance(event, GenerationStart):
                start = event
            elif isinstance(event, GenerationDelta):
                parts.append(event.text)
            else:
                end = event
        assert start is not None and end is not None
        return Generation(text="".join(parts), start=start, end=end)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """The prompt assembled within the context window (a :class:`GenerationStart` naming the sources that fit),
        then the answer's text as it is generated, then how it ended."""
        loaded = self._require()
        assembled = await asyncio.to_thread(assemble, loaded.tokenizer, request, self.settings.llm.max_answer_tokens)
        yield GenerationStart(
            model=loaded.name,
            prompt_tokens=len(assembled.prompt_ids),
            max_tokens=assembled.max_tokens,
            sources_used=assembled.used,
            truncated=assembled.truncated,
        )
        if loaded.generator is None:
            from deployments.llm_vllm import stream_completion

            events = stream_completion(self.server, loaded.name, assembled, request.sampling)
        else:
            events = _ct2_stream(loaded.generator, loaded.tokenizer, assembled, request)
        events = _until_loop(events, loaded.tokenizer)
        if request.grounded:  # every sentence checked against the passages before it is shown
            events = _checked(events, request, assembled, loaded.tokenizer)
        async for event in events:
            yield event

    # ----------------------------------------------------------------------------------- description

    def _backend(self, loaded: Loaded) -> str:
        if loaded.generator is None:
            return "vLLM through Ray Serve LLM"
        import ctranslate2

        g = loaded.generator
        return f"ctranslate2 {ctranslate2.__version__} ({g.device}, {g.compute_type})"

    def describe(self) -> list[CapabilityInfo]:
        loaded = self.loaded
        if loaded is None:
            note = f"Model {self.model_ref!r} could not be loaded: {self.load_error}" if self.load_error else None
            return [not_installed(note) if note else not_installed()]
        s = self.settings.llm
        indirect = "answered through the translation model when one is installed, else in English with a warning"
        note = (
            f"Grounded answers with citations (POST /api/v1/search/knowledgebase/{{id}}/ask) and "
            f"/v1/chat/completions. Context window {loaded.tokenizer.context_window} tokens, answers of at most "
            f"{s.max_answer_tokens} tokens; source: {loaded.entry.source}."
        )
        note += f" {measured(loaded.name)}"
        if self.load_error:
            note += f" The last reload failed and this model kept serving: {self.load_error}"
        return [
            CapabilityInfo(
                capability="llm",
                installed=True,
                model=loaded.name,
                backend=self._backend(loaded),
                note=note,
                languages=[
                    LanguageSupport.of(
                        code,
                        code in loaded.languages,
                        loaded.name,
                        None if code in loaded.languages else indirect,
                        name=lang.local_name,
                    )
                    for code, lang in languages.LANGUAGES.items()
                ],
            )
        ]


async def _until_loop(
    events: AsyncIterator[GenerationEvent], tokenizer: ChatTokenizer
) -> AsyncIterator[GenerationEvent]:
    """The generation, cut where a repetition loop begins (``engines/llm/repetition.py``): the loop's first
    occurrence is kept, the generation stops, and its end says ``looped``."""
    text = ""
    try:
        async for event in events:
            if not isinstance(event, GenerationDelta):
                yield event
                continue
            before = len(text)
            text += event.text
            cut = loop_start(text)
            if cut is None:
                yield event
                continue
            if cut > before:
                yield GenerationDelta(text=text[before:cut])
            yield GenerationEnd(finish_reason="stop", completion_tokens=tokenizer.count_text(text), looped=True)
            return
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def _checked(
    events: AsyncIterator[GenerationEvent], request: GenerationRequest, assembled: Assembled, tokenizer: ChatTokenizer
) -> AsyncIterator[GenerationEvent]:
    """Only checked text (``engines/search/grounding.py``: each sentence against the passages it cites, replaced
    by the passage's own sentence or withheld when they do not support it), a sentence behind the model; the end
    lists every sentence's fate. A model that has lost its way (:attr:`Guard.stalled`) is stopped there."""
    question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    guard = Guard(question, [request.sources[i].text for i in assembled.used])
    shown = 0
    generated = ""

    def delta(checked: list[Checked]) -> GenerationDelta | None:
        nonlocal shown
        texts = [c.text for c in checked if c.text]
        if not texts:
            return None
        piece = " ".join(texts)
        piece, shown = (f" {piece}" if shown else piece), shown + len(texts)
        return GenerationDelta(text=piece)

    def end(event: GenerationEnd, cut: bool, why: str = "the model began repeating itself") -> list[GenerationEvent]:
        out = delta(guard.finish(cut, why))
        record = [
            AnswerSentence(text=c.text, origin=c.origin, citations=[i + 1 for i in c.sources], note=c.note)
            for c in guard.record
        ]
        return [*([out] if out else []), event.model_copy(update={"sentences": record})]

    try:
        async for event in events:
            if isinstance(event, GenerationDelta):
                generated += event.text
                if (out := delta(guard.feed(event.text))) is not None:
                    yield out
                if guard.stalled:
                    stopped = GenerationEnd(finish_reason="stop", completion_tokens=tokenizer.count_text(generated))
                    for item in end(stopped, True, "the model stopped saying what the passages say"):
                        yield item
                    return
            elif isinstance(event, GenerationEnd):
                for item in end(event, cut=event.looped):
                    yield item
            else:
                yield event
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def _ct2_stream(
    generator: CT2Generator, tokenizer: ChatTokenizer, assembled: Assembled, request: GenerationRequest
) -> AsyncIterator[GenerationEvent]:
    """Submit the generation to the batch thread and relay its text to this event loop as it comes; stopping
    early (the caller went away) cancels it there."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def relay(kind: str, value: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

    sampling = request.sampling
    job = Job(
        prompt=tokenizer.tokens(assembled.prompt_ids),
        max_tokens=assembled.max_tokens,
        sampling=SamplingKey(sampling.temperature, sampling.top_p),
        stops=(*sampling.stop, *tokenizer.stops, *(GROUNDED_STOPS if request.grounded else ())),
        on_text=lambda text: relay("text", text),
        on_end=lambda reason, tokens, error: relay("end", (reason, tokens, error)),
    )
    generator.submit(job)
    try:
        while True:
            items = [await queue.get()]
            while not queue.empty():  # what piled up goes as one delta
                items.append(queue.get_nowait())
            text = "".join(value for kind, value in items if kind == "text")
            if text:
                yield GenerationDelta(text=text)
            ends = [value for kind, value in items if kind == "end"]
            if not ends:
                continue
            reason, tokens, error = ends[0]
            if error is not None:
                if isinstance(error, DomainError):
                    raise error
                raise Unavailable(f"The generation failed: {type(error).__name__}: {error}") from error
            yield GenerationEnd(finish_reason=reason or "stop", completion_tokens=tokens)
            return
    finally:
        job.cancel()

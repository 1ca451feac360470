"""CTranslate2's generator (int8 on CPU) behind a batch scheduler.

Generations that arrive together are decoded as one batch (``generate_batch`` with a per-token callback, so each
one streams its own tokens as they come): on a CPU the weights are read once per step for the whole batch, so
four streams cost far less than four times one. Requests that arrive while a batch runs form the next batch; a
batch shares one sampling setting, so a request with another temperature waits for a batch of its own. This is
static batching, not vLLM's continuous batching: a request that comes during a long generation waits for it to
end (docs/search.md, Ask: limits).

Each job decodes its own tokens to text incrementally and ends at an end token, at its token allowance, at one
of its stop strings, or when its caller cancels it (the callback then tells CTranslate2 to stop that row).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.errors import Unavailable
from contracts.llm import FinishReason
from engines.llm.tokenizer import ChatTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingKey:
    """What one batch shares."""

    temperature: float = 0.0
    top_p: float = 1.0


@dataclass
class Job:
    """One generation: its prompt (token strings), allowance, stops, and where its text goes.

    ``on_text`` gets each new piece of text; ``on_end`` is called once, with the finish reason and the number of
    tokens generated, or with the error that ended it."""

    prompt: list[str]
    max_tokens: int
    sampling: SamplingKey
    stops: tuple[str, ...]
    on_text: Callable[[str], None]
    on_end: Callable[[FinishReason | None, int, BaseException | None], None]
    ids: list[int] = field(default_factory=list)
    text: str = ""  # decoded so far
    sent: int = 0  # characters of ``text`` handed to on_text
    finished: bool = False
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class CT2Generator:
    """A CTranslate2 ``Generator`` with its tokenizer, decoding batches of :class:`Job` on a thread of its own."""

    def __init__(
        self,
        path: Path | str,
        tokenizer: ChatTokenizer,
        *,
        device: str = "cpu",
        compute_type: str = "auto",
        threads: int = 0,
        max_batch_size: int = 8,
        batch_wait_s: float = 0.005,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
    ) -> None:
        import ctranslate2

        if device == "auto":
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        if compute_type == "auto":
            compute_type = "int8_float16" if device == "cuda" else "int8"
        self.device, self.compute_type = device, compute_type
        self.model: Any = ctranslate2.Generator(
            str(path), device=device, compute_type=compute_type, intra_threads=threads
        )
        self.tokenizer = tokenizer
        self.repetition_penalty = repetition_penalty  # > 1 makes a token already generated less likely
        self.no_repeat_ngram_size = no_repeat_ngram_size  # > 0: no n-gram of that many tokens twice
        self.max_batch_size = max(1, max_batch_size)
        self.batch_wait_s = max(0.0, batch_wait_s)
        self._queue: deque[Job] = deque()
        self._wake = threading.Condition()
        self._closed = False
        self.batches = 0  # batches decoded (tests and the bench read how requests were grouped)
        self.largest_batch = 0
        self._thread = threading.Thread(target=self._loop, name="khuluma-llm-batches", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # CTranslate2 aborts the process when a generator outlives the interpreter

    # --- jobs --------------------------------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        with self._wake:
            if self._closed:  # replaced by a reload a moment ago: the caller's retry reaches the new model
                raise Unavailable("The language model is being replaced; try again.")
            self._queue.append(job)
            self._wake.notify()

    def _next_batch(self) -> list[Job] | None:
        """Wait for a job, give others ``batch_wait_s`` to join, and take those that share its sampling."""
        with self._wake:
            while not self._queue and not self._closed:
                self._wake.wait()
            if not self._queue:  # closed, and nothing left to drain
                return None
            deadline = time.monotonic() + self.batch_wait_s
            while len(self._queue) < self.max_batch_size and (left := deadline - time.monotonic()) > 0:
                self._wake.wait(left)
            key = self._queue[0].sampling
            batch = [job for job in self._queue if job.sampling == key][: self.max_batch_size]
            for job in batch:
                self._queue.remove(job)
            return batch

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            for job in batch:
                if job.cancelled:  # its caller went away while it waited
                    self._end(job, "stop", None)
            batch = [job for job in batch if not job.finished]
            if not batch:
                continue
            try:
                self._decode(batch)
            except BaseException as exc:  # every job of the batch gets the error; the loop goes on
                log.exception("generation batch of %d failed", len(batch))
                for job in batch:
                    self._end(job, None, exc)

    def _decode(self, batch: list[Job]) -> None:
        key = batch[0].sampling
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch))

        def step(result: Any) -> bool:
            return self._feed(batch[result.batch_id], result.token_id)

        self.model.generate_batch(
            [job.prompt for job in batch],
            max_length=max(job.max_tokens for job in batch),
            include_prompt_in_result=False,  # the prompt goes through the decoder at once (prefill)
            end_token=self.tokenizer.end_tokens or None,
            sampling_topk=0 if key.temperature > 0 else 1,  # 0: the whole distribution, 1: greedy
            sampling_topp=key.top_p,
            sampling_temperature=key.temperature or 1.0,
            repetition_penalty=self.repetition_penalty,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            callback=step,
        )
        for job in batch:  # ended by an end token (which is not reported) or at the batch's longest allowance
            if not job.finished:
                self._flush(job, final=True)
                self._end(job, "length" if len(job.ids) >= job.max_tokens else "stop", None)

    def _feed(self, job: Job, token_id: int) -> bool:
        """One generated token of ``job``; True stops its row of the batch."""
        if job.finished:
            return True
        if job.cancelled:
            self._end(job, "stop", None)
            return True
        try:
            job.ids.append(token_id)
            job.text = self.tokenizer.decode(job.ids)
            stop = _first_stop(job.text, job.stops, job.sent)
            if stop is not None:
                job.text = job.text[:stop]
                self._flush(job, final=True)
                self._end(job, "stop", None)
                return True
            self._flush(job, final=False)
            if len(job.ids) >= job.max_tokens:
                self._flush(job, final=True)
                self._end(job, "length", None)
                return True
        except BaseException as exc:  # noqa: BLE001 - a failing consumer ends its own job, not the batch
            self._end(job, None, exc)
            return True
        return False

    @staticmethod
    def _flush(job: Job, final: bool) -> None:
        """Hand on the text decoded since the last call, except a tail that may still change: an incomplete
        UTF-8 sequence (decoded as U+FFFD) or the start of a stop string."""
        end = len(job.text)
        if not final:
            if job.text.endswith("\ufffd"):
                return
            end -= _partial_stop(job.text, job.stops)
        if end > job.sent:
            piece, job.sent = job.text[job.sent : end], end
            job.on_text(piece)

    @staticmethod
    def _end(job: Job, reason: FinishReason | None, error: BaseException | None) -> None:
        if not job.finished:
            job.finished = True
            job.on_end(reason, len(job.ids), error)

    # --- life --------------------------------------------------------------------------------------------------

    def close(self, drain: bool = False) -> None:
        """Take no more jobs and free the model once the batch thread stops: after the waiting jobs are decoded
        too with ``drain`` (a reload: what was asked of the old model finishes on it), else after the batch it is
        in (the waiting jobs end with an error)."""
        with self._wake:
            if self._closed:
                return
            self._closed = True
            waiting = [] if drain else list(self._queue)
            if not drain:
                self._queue.clear()
            self._wake.notify_all()
        for job in waiting:
            self._end(job, None, RuntimeError("the language model was unloaded"))
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=None if drain else 60)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        self.model = None


def _first_stop(text: str, stops: tuple[str, ...], since: int) -> int | None:
    """Where the earliest stop string starts in ``text`` (searching from a little before ``since``), or None."""
    found = [i for s in stops if s and (i := text.find(s, max(0, since - len(s)))) >= 0]
    return min(found) if found else None


def _partial_stop(text: str, stops: tuple[str, ...]) -> int:
    """How many characters at the end of ``text`` could be the start of a stop string."""
    longest = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:n]):
                longest = max(longest, n)
                break
    return longest

"""What the two live transcription protocols share: the audio buffer of a stream, its stepping through the
Speech deployment, its limits, and how a session ends on an error.

``/ws/stream-transcribe`` (``serve_app.services.speech.stream``) and the Live API ``/v1/realtime``
(``serve_app.services.realtime``) differ only in their messages. Both:

- buffer the client's PCM (signed 16-bit little-endian mono, at the stream's own rate) and run a step
  (:func:`advance`) after every :data:`PARTIAL_EVERY_SECONDS` of new audio (every
  :data:`FIRST_STEPS_EVERY_SECONDS` in the first :data:`FIRST_STEPS_SECONDS`, so the first words, which the Live
  API sends once two successive partials agree on them, come sooner) and once at the end;
- without a language from the client, settle the stream's language on about 6 s of
  speech (the engine's rule, never sooner) and then judge every committed segment's language on its own speech
  (``StreamRequest.judge``): a segment in a language without a speech model is withheld (``StreamStep.withheld``,
  sent as a notice, never as an error) and counted, once, in the session's warnings;
- once the language is known, commit at every pause the VAD finds (``stream_commit_silence_ms``): the segment
  before it is decoded exactly and its audio dropped, so a partial decodes only the uncommitted tail (greedily)
  and the end of a stream has only its last segment left; everything pending is committed when no pause came for
  :data:`MAX_PENDING_SECONDS` (Whisper's window is 30 s). The segment a step committed (up to
  :data:`CONTEXT_SECONDS`) stays at the buffer's head with its text, as the context of the next commit
  (``StreamRequest.context_seconds``): a segment cut at a short pause is misheard on its own;
- when a step finds that the speech ended in a short silence (less than a commit pause), it decodes the
  uncommitted speech exactly (``StreamStep.exact_until``); the last step gets that back (``exact_tail``) and, with
  no speech after it, returns it without decoding again: the end of an utterance then waits only for the VAD;
- stop reading a client whose message is not taken within the send timeout (:func:`send`), close an idle or
  too-long session (:func:`receive`), and refuse more audio than ``max_request_mb`` (:meth:`StreamState.add_audio`);
- end on an error with one error message and a close code (:func:`guard`): 1008 bad input, 1009 too much audio,
  1011 server error, 4408 a time limit, each metered as a failed invocation with the audio received.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect

from contracts.errors import DomainError, InvalidInput, Overloaded, TooLarge
from contracts.speech import Segment, SpeechClient, StreamRequest, StreamStep, Withheld

SAMPLE_RATE = 16_000  # the rate of /ws/stream-transcribe; the Live API declares its own
PARTIAL_EVERY_SECONDS = 1.0  # a step (a partial, and a commit when a pause came) per this much new audio
FIRST_STEPS_EVERY_SECONDS = 0.5  # in the stream's first FIRST_STEPS_SECONDS: the first words come sooner
FIRST_STEPS_SECONDS = 1.0
MAX_PENDING_SECONDS = 28.0  # never keep more than this uncommitted (Whisper's window is 30 s)
CONTEXT_SECONDS = 4.0  # at most this much committed audio stays at the buffer's head, as the next commit's context
SERVER_ERROR = "Internal server error during streaming transcription."


_NUMBERS = re.compile(r"\d+(?:[.:]\d+)*")


def _kind(warning: str) -> str:
    """A warning's kind: its text without the times and counts that differ from step to step."""
    return _NUMBERS.sub("#", warning)


class ProtocolError(InvalidInput):
    """A client message that breaks the protocol: the session ends with an error naming ``code`` (1008)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.detail))


class StreamTimeout(Exception):
    """A live stream passed one of its time limits (closed with 4408). ``code`` names which, for protocols that
    say it in a field."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class StreamState:
    """A stream's uncommitted audio (``buffer``, at ``sample_rate``), where it starts in the stream (``offset``,
    seconds), what was received in all, and the segments committed so far."""

    def __init__(self, lang_code: str | None, send_timeout_s: float = 30.0, sample_rate: int = SAMPLE_RATE) -> None:
        self.lang_code = lang_code
        self.judge = lang_code is None  # no language from the client: every segment's language is checked
        self.send_timeout_s = send_timeout_s
        self.sample_rate = sample_rate
        self.buffer = bytearray()
        self.offset = 0.0  # seconds of audio before the buffer
        self.context_seconds = 0.0  # the buffer's head that is committed already (the next commit's context)
        self.context_text = ""  # its text
        self.exact_tail: list[Segment] = []  # the last step's exact decode of the uncommitted speech, if it made one
        self.exact_until = 0.0  # seconds of the stream it covers
        self.exact_language: str | None = None  # the language it was decoded in
        self.total_bytes = 0
        self.since_partial = 0
        self.segments: list[Segment] = []
        self.withheld: list[Withheld] = []
        self._warnings: dict[str, str] = {}  # of every step (guards, uncertain language): the latest of each kind

    @property
    def bytes_per_second(self) -> int:
        return self.sample_rate * 2

    @property
    def pending_seconds(self) -> float:
        return len(self.buffer) / self.bytes_per_second

    @property
    def has_new_audio(self) -> bool:
        """Whether the buffer holds more than its committed head (the context)."""
        return self.pending_seconds > self.context_seconds

    @property
    def audio_seconds(self) -> float:
        """All the audio received, in seconds (what is metered)."""
        return self.total_bytes / self.bytes_per_second

    def committed_text(self) -> str:
        return " ".join(s.text for s in self.segments if s.text).strip()

    def given_language(self, lang_code: str) -> None:
        """The client named the language: it is used as given, and segments are no longer judged."""
        self.lang_code, self.judge = lang_code, False

    def warn(self, warnings: list[str]) -> None:
        """Keep each kind of warning once: a later one of a kind (the same text but for its times and counts)
        replaces the earlier, so a long session ends with one line per problem, not one per step."""
        for warning in warnings:
            self._warnings[_kind(warning)] = warning

    @property
    def warnings(self) -> list[str]:
        """The session's warnings: one per kind, and one for all the speech withheld."""
        out = list(self._warnings.values())
        if self.withheld:
            seconds = sum(w.end_time - w.start_time for w in self.withheld)
            likely = sorted({w.language_code for w in self.withheld if w.language_code})
            named = f" (most likely {', '.join(likely)})" if likely else ""
            out.append(
                f"{len(self.withheld)} segment(s), {seconds:.1f} s of speech, were not transcribed: they are in a "
                f"language without a speech model here{named}. {self.withheld[-1].detail}"
            )
        return out

    def add_audio(self, data: bytes, limit_bytes: int) -> bool:
        """Buffer ``data``; True when a step is due. More than ``limit_bytes`` in all -> TooLarge (1009)."""
        self.buffer += data
        self.total_bytes += len(data)
        self.since_partial += len(data)
        if self.total_bytes > limit_bytes:
            raise TooLarge(f"The stream exceeds the limit of {limit_bytes // (1024 * 1024)} MB of audio.")
        every = FIRST_STEPS_EVERY_SECONDS if self.audio_seconds <= FIRST_STEPS_SECONDS else PARTIAL_EVERY_SECONDS
        if self.since_partial >= every * self.bytes_per_second:
            self.since_partial = 0
            return True
        return False


@dataclass
class Advance:
    """One step's outcome: the segments committed by it (already in ``state.segments``, their audio dropped),
    the whole hypothesis of the buffer it decoded (committed and pending segments, in order) and the text that
    may still change."""

    step: StreamStep
    committed: list[Segment]
    hypothesis: list[Segment]
    pending_text: str
    withheld: list[Withheld]


async def advance(client: SpeechClient, state: StreamState, final: bool) -> Advance:
    """Decode the buffer once: keep the language once it is settled, commit what ended in a pause (once the
    language is known; everything at the end of the stream, or after :data:`MAX_PENDING_SECONDS` without a
    pause) and drop the committed audio."""
    commit_before = None
    if not final and state.lang_code is not None:
        commit_before = state.pending_seconds
    # the last step may return the step before's exact decode, if made in the language still asked for
    reuse = final and state.exact_language == state.lang_code
    step = await client.transcribe_pcm(
        StreamRequest(
            pcm=bytes(state.buffer),
            sample_rate=state.sample_rate,
            language=state.lang_code,
            offset=state.offset,
            commit_before=commit_before,
            final=final,
            context_seconds=state.context_seconds,
            context_text=state.context_text,
            exact_tail=state.exact_tail if reuse else [],
            exact_until=state.exact_until if reuse else 0.0,
            judge=state.judge,
        )
    )
    if state.lang_code is None and step.language_code and step.language_settled:
        state.lang_code = step.language_code  # the stream's language; each segment is still judged on its own
    state.warn(step.warnings)
    state.withheld += step.withheld
    committed = list(step.final)
    cut = step.cut_seconds
    if final or (not cut and state.pending_seconds - state.context_seconds > MAX_PENDING_SECONDS):
        committed += step.pending  # end of audio, or no pause for too long: take what we have
        cut, pending_text = state.pending_seconds, ""
        state.exact_tail, state.exact_until = [], 0.0
    else:
        pending_text = step.pending_text
        # the step's exact decode of the uncommitted speech, if it made one: the last step may return it as is
        state.exact_tail, state.exact_until = (list(step.pending), step.exact_until) if step.exact_until else ([], 0.0)
        state.exact_language = state.lang_code
    state.segments += committed
    if cut:
        # what this step committed stays at the buffer's head, with its text, as the next commit's context
        keep = cut - state.context_seconds if step.final and not final else 0.0
        keep = keep if keep <= CONTEXT_SECONDS else 0.0
        drop = min(len(state.buffer), int((cut - keep) * state.sample_rate) * 2)
        del state.buffer[:drop]
        state.offset += drop / state.bytes_per_second
        state.context_seconds = min(state.pending_seconds, keep)
        state.context_text = " ".join(s.text for s in step.final if s.text).strip() if keep else ""
    return Advance(step, committed, list(step.final) + list(step.pending), pending_text, list(step.withheld))


async def send(websocket: WebSocket, state: StreamState, message: dict[str, Any]) -> None:
    """Send, or give up on a client that stopped reading: nothing else is read from it meanwhile (backpressure)."""
    try:
        await asyncio.wait_for(websocket.send_json(message), state.send_timeout_s)
    except TimeoutError:
        raise StreamTimeout(
            f"The client did not read for {state.send_timeout_s:g} s "
            "(KHULUMA_TRANSCRIPTION_STREAM_SEND_TIMEOUT_SECONDS).",
            "client_not_reading",
        ) from None


class StreamClosing(Exception):
    """The server asked the session to end (a graceful stop): it gets its last results and a 1001 close."""


async def receive(
    websocket: WebSocket, idle_s: float, ends_at: float, stop: asyncio.Event | None = None
) -> dict[str, Any]:
    """The next message, within the idle limit and the session's end (monotonic time). A client that went away
    raises WebSocketDisconnect; :class:`StreamClosing` as soon as ``stop`` is set (the server is shutting down),
    even while the client sends nothing."""
    left = ends_at - time.monotonic()
    receiving = asyncio.ensure_future(websocket.receive())
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    waiting = {receiving} if stopping is None else {receiving, stopping}
    try:
        done, _ = await asyncio.wait(waiting, timeout=max(0.0, min(idle_s, left)), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if stopping is not None:
            stopping.cancel()
    if receiving not in done:
        receiving.cancel()
        if stopping is not None and stopping in done:
            raise StreamClosing
        if left <= idle_s:
            raise StreamTimeout(
                "The stream reached its longest session (KHULUMA_TRANSCRIPTION_STREAM_MAX_SECONDS).", "session_expired"
            )
        raise StreamTimeout(
            f"Nothing was received for {idle_s:g} s (KHULUMA_TRANSCRIPTION_STREAM_IDLE_SECONDS).", "idle_timeout"
        )
    message = dict(receiving.result())  # a message that came with the stop is still handled; the next call stops
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    return message


def close_code(exc: DomainError) -> int:
    """WebSocket close code of a domain error: 1008 bad input (a language without a model too), 1009 too much
    audio, 1013 try again later (the model's queue is full), 1011 anything else (the service cannot answer)."""
    if isinstance(exc, Overloaded):
        return 1013
    if isinstance(exc, TooLarge):
        return 1009
    if isinstance(exc, InvalidInput):
        return 1008
    return 1011


ErrorMessage = Callable[[str, str], dict[str, Any]]  # (what went wrong, its code) -> the protocol's error message


async def guard(
    websocket: WebSocket,
    state: StreamState,
    session: Awaitable[None],
    meter: Callable[[str], Awaitable[None]],
    error_message: ErrorMessage,
    name: Callable[[DomainError], DomainError] = lambda exc: exc,
    closing: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run a stream's ``session`` (which meters and closes a session that ends well); on a disconnect, a time
    limit or an error, meter it as failed and close with the protocol's error message. ``name`` words a domain
    error as the client sees it (a language error names the protocol's field). ``closing``: how the protocol ends
    a session the server closes (a graceful stop: :class:`StreamClosing`)."""
    try:
        await session
    except StreamClosing:
        if closing is not None:
            await closing()
    except WebSocketDisconnect:
        await meter("failed")
    except StreamTimeout as exc:
        await meter("failed")
        await close_with(websocket, error_message(str(exc), exc.code), 4408, wait_s=min(1.0, state.send_timeout_s))
    except DomainError as exc:
        await meter("failed")
        await close_with(websocket, error_message(name(exc).detail, error_code(exc)), close_code(exc))
    except Exception:
        await meter("failed")
        await close_with(websocket, error_message(SERVER_ERROR, "server_error"), 1011)
        raise


def error_code(exc: DomainError) -> str:
    """A short code for a domain error, for protocols whose error messages carry one."""
    if isinstance(exc, ProtocolError):
        return exc.code
    name = type(exc).__name__
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


async def close_with(websocket: WebSocket, message: dict[str, Any], code: int, wait_s: float = 10.0) -> None:
    """Say why, then close; within ``wait_s`` (a client that stopped reading may never take the message)."""
    reason = str(message.get("detail") or message.get("error", {}).get("message", ""))
    try:
        async with asyncio.timeout(wait_s):
            await websocket.send_json(message)
            await websocket.close(code=code, reason=reason[:120])
    except (RuntimeError, WebSocketDisconnect, TimeoutError):
        pass

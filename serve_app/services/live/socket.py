"""The WebSocket side of a live session: sending with backpressure (:func:`send`), receiving within its time
limits (:func:`receive`), and how a session ends on an error (:func:`guard`): 1008 bad input, 1009 too much
audio, 1011 server error, 1013 try again later, 4408 a time limit, each metered as a failed invocation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect

from contracts.errors import DomainError, InvalidInput, Overloaded, TooLarge, UnsupportedLanguage
from serve_app.services.live.state import StreamState

SERVER_ERROR = "Internal server error during streaming transcription."


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


async def send(websocket: WebSocket, state: StreamState, message: dict[str, Any]) -> None:
    """Send, or give up on a client that stopped reading: nothing else is read from it meanwhile (backpressure)."""
    try:
        await asyncio.wait_for(websocket.send_json(message), state.send_timeout_s)
    except TimeoutError:
        raise StreamTimeout(
            f"The client did not read for {state.send_timeout_s:g} s (KHULUMA_SPEECH_STREAM_SEND_TIMEOUT_SECONDS).",
            "client_not_reading",
        ) from None


class StreamClosing(Exception):
    """The server asked the session to end (a graceful stop): it gets its last results and a 1001 close."""


QUIET = {"type": "khuluma.quiet"}  # what :func:`receive` answers when the client paused (``quiet_s``)


async def receive(
    websocket: WebSocket,
    idle_s: float,
    ends_at: float,
    stop: asyncio.Event | None = None,
    quiet_s: float | None = None,
) -> dict[str, Any]:
    """The next message, within the idle limit and the session's end (monotonic time). A client that went away
    raises WebSocketDisconnect; :class:`StreamClosing` as soon as ``stop`` is set (the server is shutting down),
    even while the client sends nothing. ``quiet_s``: :data:`QUIET` when nothing came for that long (the client
    paused, or sent its audio faster than real time and is done), so the session can step on what it has."""
    left = ends_at - time.monotonic()
    limit = min(idle_s, left)
    quiet = quiet_s is not None and quiet_s < limit
    receiving = asyncio.ensure_future(websocket.receive())
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    waiting = {receiving} if stopping is None else {receiving, stopping}
    try:
        timeout = max(0.0, quiet_s if quiet and quiet_s is not None else limit)
        done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if stopping is not None:
            stopping.cancel()
    if receiving not in done:
        receiving.cancel()
        if stopping is not None and stopping in done:
            raise StreamClosing
        if quiet:
            return dict(QUIET)
        if left <= idle_s:
            raise StreamTimeout(
                "The stream reached its longest session (KHULUMA_SPEECH_STREAM_MAX_SECONDS).", "session_expired"
            )
        raise StreamTimeout(
            f"Nothing was received for {idle_s:g} s (KHULUMA_SPEECH_STREAM_IDLE_SECONDS).", "idle_timeout"
        )
    message = dict(receiving.result())  # a message that came with the stop is still handled; the next call stops
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    return message


CATCH_UP_WAIT_S = 0.002  # a message that has not arrived within this is not waiting


async def waiting(websocket: WebSocket) -> dict[str, Any] | None:
    """A message the client sent that is waiting to be read, or None at once (see ``StreamState.catching_up``)."""
    try:
        message = dict(await asyncio.wait_for(websocket.receive(), CATCH_UP_WAIT_S))
    except TimeoutError:
        return None
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
    language_field: str | None = None,
    closing: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run a stream's ``session`` (which meters and closes a session that ends well); on a disconnect, a time
    limit or an error, meter it as failed and close with the protocol's error message. ``language_field``: the
    protocol's field a language error names. ``closing``: how the protocol ends a session the server closes (a
    graceful stop: :class:`StreamClosing`)."""
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
        if language_field and isinstance(exc, UnsupportedLanguage):
            exc = exc.for_field(language_field)
        await close_with(websocket, error_message(exc.detail, error_code(exc)), close_code(exc))
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

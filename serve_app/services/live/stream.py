"""``/ws/stream-transcribe``: live transcription over a WebSocket, in this service's own protocol
(:data:`PROTOCOL`). The router authenticated and admitted the caller; the stepping, limits and close codes are
shared with the Live API (``serve_app.services.live``). Metered as route ``transcribe_stream``: the seconds of
audio received."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect

from contracts.errors import DomainError, InvalidInput
from contracts.speech import SpeechClient
from serve_app.admission import LiveSeat
from serve_app.context import AppContext, speech_client
from serve_app.lifecycle import GOING_AWAY
from serve_app.services.live.socket import QUIET, StreamTimeout, guard, receive, send, waiting
from serve_app.services.live.state import SAMPLE_RATE, StreamState
from serve_app.services.live.steps import live_step
from serve_app.services.usage import record_usage
from serve_app.tokens import Principal

ROUTE_STREAM = "transcribe_stream"
LANGUAGE_FIELD = "lang_code"  # the query parameter or config field that carries the language


PROTOCOL = """\
WebSocket /ws/stream-transcribe  (token: X-CLIENT-TOKEN header or ?token=; optional ?lang_code=)

client -> server
  binary frames   raw PCM, signed 16-bit little-endian, 16 kHz, mono (any frame size)
  text {"type": "config", "lang_code": "eng"}   optional, before the audio
  text "EOS" or {"type": "end"}                 end of audio: the server answers "final" and closes (1000)

server -> client (JSON text frames)
  {"type": "ready", "sample_rate": 16000, "encoding": "pcm_s16le", "channels": 1}
  {"type": "partial", "text": ..., "pending_text": ..., "language_code": ..., "audio_seconds": ...,
   "warnings": [...]}
      after every second of new audio (every half second until the first words are committed), and when the
      client pauses: everything so far; the pending part may still change. Without lang_code, language_code is ""
      and nothing is shown until the stream's language is settled
  {"type": "segment", "start_time", "end_time", "text", "words": [...], "confidence", "language_code", "warnings"}
      a segment that will not change any more (ended in a pause); without lang_code each segment's language is
      checked on its own speech: language_code says which it was transcribed in
  {"type": "withheld", "start_time", "end_time", "language_code", "detail"}
      without lang_code: committed speech in a language without a speech model, not transcribed (a notice: the
      session goes on; language_code names the likely language where one can be named)
  {"type": "final", "text", "language_code", "audio_length_seconds", "segments": [...], "warnings": [...]}
  {"type": "error", "detail": ...}    then close (1008 bad input, 1009 too much audio, 1011 server error,
                                      4408 a time limit: idle, session length, or a client that stopped reading)
      1013 try again later: the model's queue is full;
      a graceful stop of the server: "final" over the audio received so far (its warnings say why), then close 1001
      without lang_code, a stream whose first ~6 s of speech are in a language that has no speech model is refused
      this way (1008); segments that fail the hallucination guards never appear (a warning says so)
"""


async def _live_step(client: SpeechClient, state: StreamState, websocket: WebSocket, final: bool) -> None:
    """A live step (``steps.live_step``), and the messages it gives: its segments, withheld notices, a partial."""
    outcome = await live_step(client, state, final)
    if final:
        return
    notices = [(s.start_time, {"type": "segment", **s.model_dump()}) for s in outcome.committed]
    notices += [(w.start_time, {"type": "withheld", **w.model_dump()}) for w in outcome.withheld]
    for _, message in sorted(notices, key=lambda pair: pair[0]):
        await send(websocket, state, message)
    text = (state.committed_text() + " " + outcome.pending_text).strip()
    await send(
        websocket,
        state,
        {
            "type": "partial",
            "text": text,
            "pending_text": outcome.pending_text,
            "language_code": state.lang_code if state.lang_code else outcome.step.language_code,
            "audio_seconds": round(state.audio_seconds, 3),
            "warnings": outcome.step.warnings,
        },
    )


async def _catch_up(websocket: WebSocket, state: StreamState, limit: int) -> dict[str, Any] | None:
    """The audio frames already waiting join the step that is due (``StreamState.catching_up``); the first other
    message waiting is returned, to be handled after it."""
    caught = 0
    while state.catching_up(caught) and (message := await waiting(websocket)) is not None:
        if not message.get("bytes"):
            return message
        caught += len(message["bytes"])
        state.add_audio(message["bytes"], limit)
    return None


def _is_end(text: str) -> tuple[bool, dict[str, Any]]:
    if text.strip() == "EOS":
        return True, {}
    try:
        message = json.loads(text)
    except ValueError:
        raise InvalidInput('Text frames must be "EOS" or JSON like {"type": "end"}.') from None
    if not isinstance(message, dict):
        raise InvalidInput("Text frames must be JSON objects.")
    return message.get("type") in ("end", "eos", "EOS"), message


async def stream(ctx: AppContext, caller: Principal, websocket: WebSocket, seat: LiveSeat | None = None) -> None:
    """Streaming transcription over a WebSocket (the router authenticated and admitted the caller; ``seat`` is its
    place among the live sessions, which a graceful stop closes); see :data:`PROTOCOL`."""
    await websocket.accept()
    limits = ctx.settings.speech
    state = StreamState(websocket.query_params.get("lang_code") or None, limits.stream_send_timeout_seconds)

    async def meter(status: str) -> None:
        if state.total_bytes or status == "successful":
            await record_usage(ctx, caller, ROUTE_STREAM, status=status, seconds=state.audio_seconds)

    async def closing() -> None:
        """A graceful stop ends the session: the audio received so far is finished and sent as ``final`` (within
        :data:`CLOSING_STEP_S`), then the socket closes with 1001 (going away) and the reason."""
        reason = (seat.reason if seat else "") or "The server is shutting down."
        try:
            async with asyncio.timeout(CLOSING_STEP_S):
                await _finish(speech_client(ctx), state, websocket, warning=reason)
            await meter("successful")
        except (DomainError, TimeoutError, StreamTimeout, WebSocketDisconnect, RuntimeError):
            await meter("failed")
        try:
            async with asyncio.timeout(1.0):
                await websocket.close(code=GOING_AWAY, reason=reason[:120])
        except (RuntimeError, WebSocketDisconnect, TimeoutError):
            pass

    await guard(
        websocket,
        state,
        _stream_session(ctx, websocket, state, meter, seat.stop if seat is not None else None),
        meter,
        lambda detail, _code: {"type": "error", "detail": detail},
        LANGUAGE_FIELD,
        closing,
    )


CLOSING_STEP_S = 10.0  # a session closed by a graceful stop: at most this long for its last step


async def _finish(client: SpeechClient, state: StreamState, websocket: WebSocket, warning: str = "") -> None:
    """The last step over the audio still pending, then the ``final`` message."""
    if state.has_new_audio:
        await _live_step(client, state, websocket, final=True)
    await send(
        websocket,
        state,
        {
            "type": "final",
            "text": state.committed_text(),
            "language_code": state.lang_code or "",
            "audio_length_seconds": round(state.audio_seconds, 3),
            "segments": [s.model_dump() for s in state.segments],
            "warnings": [*state.warnings, warning] if warning else state.warnings,
        },
    )


async def _stream_session(
    ctx: AppContext,
    websocket: WebSocket,
    state: StreamState,
    meter: Callable[[str], Awaitable[None]],
    stop: asyncio.Event | None = None,
) -> None:
    limits = ctx.settings.speech
    limit = int(ctx.settings.max_request_mb * 1024 * 1024)
    ends_at = time.monotonic() + limits.stream_max_seconds
    client = speech_client(ctx)
    if state.lang_code:
        await client.check_language(state.lang_code)
    await send(websocket, state, {"type": "ready", "sample_rate": SAMPLE_RATE, "encoding": "pcm_s16le", "channels": 1})
    unread: dict[str, Any] | None = None  # a message read while catching up, handled next
    while True:
        message = unread or await receive(websocket, limits.stream_idle_seconds, ends_at, stop, quiet_s=state.quiet_s)
        unread = None
        if message == QUIET:  # the client paused: what it sent is decoded now, not when more comes
            await _live_step(client, state, websocket, final=False)
            continue
        data, text = message.get("bytes"), message.get("text")
        if data:
            if state.add_audio(data, limit):
                unread = await _catch_up(websocket, state, limit)
                if unread is None or unread.get("text") is None or not _is_end(unread["text"])[0]:
                    await _live_step(client, state, websocket, final=False)
        elif text is not None:
            end, config = _is_end(text)
            if config.get("type") == "config" and config.get("lang_code"):
                state.given_language(str(config["lang_code"]))
                await client.check_language(str(config["lang_code"]))  # before any audio is decoded
            if end:
                await _finish(client, state, websocket)
                await meter("successful")
                await websocket.close(code=1000)
                return

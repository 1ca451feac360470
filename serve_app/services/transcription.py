"""Synchronous and streaming transcription services (the async v1 jobs live in ``serve_app.services.jobs``).

- :func:`sync_file`: ``POST /api/v2alpha/transcribe/sync/file`` (field ``file``) and ``POST /v1/transcribe/sync``
  (same, plus ``translate``) -> the full transcription record (``contracts.speech.build_record``). Past
  ``transcription.sync_timeout_seconds`` -> 504 (TimedOut).
- :func:`fast`: ``POST /api/v2alpha/transcribe/fast`` (field ``upload``) -> ``{text, lang_code, diarisation}``.
  Past ``transcription.fast_timeout_seconds`` -> 503 (Unavailable: the spec's "request timed out").
- :func:`v1_sync`: ``POST /api/v1/transcribe/sync`` (JSON, base64 ``audio_blob``) -> ``{message, text,
  language_id}``; base64 that does not decode -> 400.
- :func:`stream`: the ``/ws/stream-transcribe`` WebSocket (protocol in :data:`STREAM_PROTOCOL`).

Uploads stream to a spool file in ``<data_dir>/uploads`` on the ingress's own node (413 beyond ``max_request_mb``
without reading the rest) and are deleted after the answer; the Transcription replica (on any node) receives the
bytes as a ``Blob``: inline when small, else through object storage (``cluster/transfer.py``). Every
transcription records one usage row (seconds of audio, successful or failed). Language errors come from the
deployment without a field name; this module names the request field (``lang_code``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from fastapi import Request, WebSocket, WebSocketDisconnect

from cluster.transfer import blob_from_bytes, blob_from_file, discard
from contracts.errors import (
    DomainError,
    InvalidInput,
    Overloaded,
    TimedOut,
    TooLarge,
    Unavailable,
    UnsupportedLanguage,
)
from contracts.payloads import Blob
from contracts.speech import (
    Segment,
    StreamRequest,
    TranscribeRequest,
    TranscriptionClient,
    TranscriptionRecord,
    TranscriptionResult,
    build_record,
)
from serve_app.admission import LiveSeat
from serve_app.context import AppContext, required
from serve_app.lifecycle import GOING_AWAY
from serve_app.schemas.transcribe import FastTranscription, V1SyncResult
from serve_app.services.jobs import decode_audio_blob  # the v1 base64 body, shared with the v1 upload route
from serve_app.services.usage import record_usage
from serve_app.tokens import Principal
from serve_app.uploads import SavedUpload, receive_file, sanitize_filename

ROUTE_SYNC = "transcribe_sync"
ROUTE_API_SYNC = "transcribe_api_sync"
ROUTE_FAST = "transcribe_fast"
ROUTE_V1_SYNC = "transcribe_v1_sync"
ROUTE_STREAM = "transcribe_stream"
LANGUAGE_FIELD = "lang_code"  # the request field (query or stream config) that carries the language
T = TypeVar("T")
_GRACE_SECONDS = 2.0  # the engine stops itself at the deadline; the outer guard waits a little longer


def _limit_bytes(ctx: AppContext) -> int:
    return int(ctx.settings.max_request_mb * 1024 * 1024)


def _uploads(ctx: AppContext) -> Path:
    return ctx.settings.data_dir / "uploads"


def _transcription(ctx: AppContext) -> TranscriptionClient:
    return required(ctx.clients.transcription, "transcription")


def _named(exc: DomainError) -> DomainError:
    """The error as the client sees it: a language error names the request field."""
    return exc.for_field(LANGUAGE_FIELD) if isinstance(exc, UnsupportedLanguage) else exc


async def _transcribe(
    ctx: AppContext,
    caller: Principal,
    route: str,
    request: TranscribeRequest,
    *,
    timeout: float,
    on_timeout: type[DomainError],
    started: float,
) -> TranscriptionResult:
    """Run the transcription with a deadline and meter the call (successful or failed). ``on_timeout``: the
    route's answer past the deadline (TimedOut on the sync routes, Unavailable on the fast route)."""
    client = _transcription(ctx)
    remaining = max(0.1, timeout - (time.monotonic() - started))
    message = (
        f"Transcription did not finish within the {timeout:g} s limit; send shorter audio or use the "
        f"asynchronous upload/process routes."
    )
    try:
        try:
            result = await asyncio.wait_for(
                client.transcribe(request.model_copy(update={"timeout_s": remaining})), remaining + _GRACE_SECONDS
            )
        except (TimeoutError, TimedOut):  # asyncio.wait_for's timeout is the builtin TimeoutError
            raise on_timeout(message) from None
        except UnsupportedLanguage as exc:
            raise _named(exc) from None
    except Overloaded:
        raise  # shed before any work (the deployment's queue was full): a refusal, not a failed invocation
    except Exception:
        await record_usage(ctx, caller, route, status="failed")
        raise
    await record_usage(ctx, caller, route, seconds=result.audio_length_seconds)
    return result


async def _metered(ctx: AppContext, caller: Principal, route: str, receiving: Awaitable[T]) -> T:
    """Await the upload step; a rejected upload (400/413/415) is metered as a failed invocation."""
    try:
        return await receiving
    except DomainError:
        await record_usage(ctx, caller, route, status="failed")
        raise


async def sync_file(
    ctx: AppContext,
    caller: Principal,
    request: Request,
    lang_code: str | None,
    diarise: bool,
    detect_music: bool,
    translate: bool = False,
) -> TranscriptionRecord:
    started = time.monotonic()
    route = ROUTE_API_SYNC if translate else ROUTE_SYNC
    await ctx.admission.check_audio(caller)  # the customer's audio of the day: 429 before the upload is read
    upload = await _metered(ctx, caller, route, receive_file(request, "file", _limit_bytes(ctx), _uploads(ctx)))
    audio = None
    try:
        audio = await _metered(ctx, caller, route, _blob(ctx, upload))
        result = await _transcribe(
            ctx,
            caller,
            route,
            TranscribeRequest(
                audio=audio,
                file_name=upload.filename,
                language=lang_code or None,
                diarise=diarise,
                detect_music=detect_music,
                translate=translate,
            ),
            timeout=ctx.settings.transcription.sync_timeout_seconds,
            on_timeout=TimedOut,
            started=started,
        )
    finally:
        await _release(ctx, upload, audio)
    return build_record(
        result,
        id=str(uuid.uuid4()),
        customer_id=caller.customer_id,
        project_id=caller.project_id,
        keychain_id=caller.token_id,
        blob_name=upload.filename,
        upload_file_size=upload.size,
    )


async def fast(ctx: AppContext, caller: Principal, request: Request, lang_code: str | None) -> FastTranscription:
    started = time.monotonic()
    await ctx.admission.check_audio(caller)
    upload = await _metered(ctx, caller, ROUTE_FAST, receive_file(request, "upload", _limit_bytes(ctx), _uploads(ctx)))
    audio = None
    try:
        audio = await _metered(ctx, caller, ROUTE_FAST, _blob(ctx, upload))
        result = await _transcribe(
            ctx,
            caller,
            ROUTE_FAST,
            TranscribeRequest(audio=audio, file_name=upload.filename, language=lang_code or None),
            timeout=ctx.settings.transcription.fast_timeout_seconds,
            on_timeout=Unavailable,
            started=started,
        )
    finally:
        await _release(ctx, upload, audio)
    return FastTranscription(
        text=result.text,
        lang_code=result.language_code,
        diarisation={},
        words=result.words,
        warnings=result.warnings,
        audio_length_seconds=result.audio_length_seconds,
    )


async def _blob(ctx: AppContext, upload: SavedUpload) -> Blob:
    """The spooled upload as the Transcription replica will receive it (inline, or via object storage)."""
    return await anyio.to_thread.run_sync(blob_from_file, ctx.settings, upload.path, upload.filename)


async def _release(ctx: AppContext, upload: SavedUpload, audio: Blob | None) -> None:
    """After the answer: the spooled upload and any object the audio travelled through go."""
    await anyio.to_thread.run_sync(upload.delete)
    if audio is not None:
        await anyio.to_thread.run_sync(discard, ctx.settings, audio)


def _decoded_blob(ctx: AppContext, file_name: str, audio_blob: str) -> Blob:
    data = decode_audio_blob(audio_blob, _limit_bytes(ctx))
    return blob_from_bytes(ctx.settings, data, sanitize_filename(file_name, default="audio"))


async def v1_sync(ctx: AppContext, caller: Principal, file_name: str, audio_blob: str) -> V1SyncResult:
    started = time.monotonic()
    await ctx.admission.check_audio(caller)
    audio = await _metered(
        ctx, caller, ROUTE_V1_SYNC, anyio.to_thread.run_sync(_decoded_blob, ctx, file_name, audio_blob)
    )
    try:
        result = await _transcribe(
            ctx,
            caller,
            ROUTE_V1_SYNC,
            TranscribeRequest(audio=audio, file_name=sanitize_filename(file_name, default="audio")),
            timeout=ctx.settings.transcription.sync_timeout_seconds,
            on_timeout=TimedOut,
            started=started,
        )
    finally:
        await anyio.to_thread.run_sync(discard, ctx.settings, audio)
    return V1SyncResult(message="Transcription successful.", text=result.text, language_id=result.language_code)


# ------------------------------------------------------------------------------------------------ streaming

STREAM_PROTOCOL = """\
WebSocket /ws/stream-transcribe  (token: X-CLIENT-TOKEN header or ?token=; optional ?lang_code=)

client -> server
  binary frames   raw PCM, signed 16-bit little-endian, 16 kHz, mono (any frame size)
  text {"type": "config", "lang_code": "eng"}   optional, before the audio
  text "EOS" or {"type": "end"}                 end of audio: the server answers "final" and closes (1000)

server -> client (JSON text frames)
  {"type": "ready", "sample_rate": 16000, "encoding": "pcm_s16le", "channels": 1}
  {"type": "partial", "text": ..., "pending_text": ..., "language_code": ..., "audio_seconds": ...,
   "warnings": [...]}
      after every ~2 s of new audio: everything so far; the pending part may still change
  {"type": "segment", "start_time", "end_time", "text", "words": [...], "confidence"}
      a segment that will not change any more (ended in a pause)
  {"type": "final", "text", "language_code", "audio_length_seconds", "segments": [...], "warnings": [...]}
  {"type": "error", "detail": ...}    then close (1008 bad input, 1009 too much audio, 1011 server error,
                                      1013 the model's queue is full (try again later),
                                      4408 a time limit: idle, session length, or a client that stopped reading)
  a graceful stop of the server: "final" over the audio received so far (its warnings say why), then close 1001
      without lang_code, audio in a language that has no speech model is refused this way (1008) once about
      6 s of speech are in; segments that fail the hallucination guards never appear (a warning says so)
"""

BYTES_PER_SECOND = 32_000  # 16 kHz x 2 bytes
PARTIAL_EVERY_SECONDS = 2.0
COMMIT_AFTER_SECONDS = 8.0  # beyond this much pending audio, finished segments are committed
MAX_PENDING_SECONDS = 28.0  # never keep more than this uncommitted (Whisper's window is 30 s)


class _StreamTimeout(Exception):
    """A live stream passed one of its time limits (closed with 4408)."""


class _StreamState:
    def __init__(self, lang_code: str | None, send_timeout_s: float = 30.0) -> None:
        self.lang_code = lang_code
        self.send_timeout_s = send_timeout_s
        self.buffer = bytearray()
        self.offset = 0.0  # seconds of audio before the buffer
        self.total_bytes = 0
        self.since_partial = 0
        self.segments: list[Segment] = []
        self.warnings: list[str] = []  # of every step (hallucination guards, uncertain language), each once

    @property
    def pending_seconds(self) -> float:
        return len(self.buffer) / BYTES_PER_SECOND

    def committed_text(self) -> str:
        return " ".join(s.text for s in self.segments if s.text).strip()


async def _stream_step(client: TranscriptionClient, state: _StreamState, websocket: WebSocket, final: bool) -> None:
    commit_before = None
    if not final and state.pending_seconds > COMMIT_AFTER_SECONDS:
        commit_before = state.pending_seconds - 1.0
    step = await client.transcribe_pcm(
        StreamRequest(
            pcm=bytes(state.buffer),
            language=state.lang_code,
            offset=state.offset,
            commit_before=commit_before,
            final=final,
        )
    )
    if state.lang_code is None and step.language_code and step.language_settled:
        state.lang_code = step.language_code  # keep the detected language for the whole session
    state.warnings += [w for w in step.warnings if w not in state.warnings]
    committed = list(step.final)
    cut = step.cut_seconds
    if final or (not cut and state.pending_seconds > MAX_PENDING_SECONDS):
        committed += step.pending  # end of audio, or no pause for too long: take what we have
        cut, pending_text = state.pending_seconds, ""
    else:
        pending_text = step.pending_text
    for segment in committed:
        state.segments.append(segment)
        if not final:
            await _send(websocket, state, {"type": "segment", **segment.model_dump()})
    if cut:
        drop = min(len(state.buffer), int(cut * 16_000) * 2)
        del state.buffer[:drop]
        state.offset += drop / BYTES_PER_SECOND
    if not final:
        text = (state.committed_text() + " " + pending_text).strip()
        await _send(
            websocket,
            state,
            {
                "type": "partial",
                "text": text,
                "pending_text": pending_text,
                "language_code": state.lang_code if state.lang_code else step.language_code,
                "audio_seconds": round(state.total_bytes / BYTES_PER_SECOND, 3),
                "warnings": step.warnings,
            },
        )


async def _send(websocket: WebSocket, state: _StreamState, message: dict[str, Any]) -> None:
    """Send, or give up on a client that stopped reading: nothing else is read from it meanwhile (backpressure)."""
    try:
        await asyncio.wait_for(websocket.send_json(message), state.send_timeout_s)
    except TimeoutError:
        raise _StreamTimeout(
            f"The client did not read for {state.send_timeout_s:g} s "
            "(KHULUMA_TRANSCRIPTION_STREAM_SEND_TIMEOUT_SECONDS)."
        ) from None


class _StreamClosing(Exception):
    """The server asked the session to end (a graceful stop): it gets its final message and a 1001 close."""


async def _receive(
    websocket: WebSocket, idle_s: float, ends_at: float, stop: asyncio.Future[Any] | None = None
) -> dict[str, Any]:
    """The next message, within the idle limit and the session's end (monotonic time); :class:`_StreamClosing`
    as soon as ``stop`` is done (the server is shutting down), even while the client sends nothing."""
    left = ends_at - time.monotonic()
    receiving = asyncio.ensure_future(websocket.receive())
    waiting: set[asyncio.Future[Any]] = {receiving} if stop is None else {receiving, stop}
    done, _ = await asyncio.wait(waiting, timeout=max(0.0, min(idle_s, left)), return_when=asyncio.FIRST_COMPLETED)
    if receiving in done:
        return dict(receiving.result())  # a message that came with the stop is still handled; the next call stops
    receiving.cancel()
    if stop is not None and stop in done:
        raise _StreamClosing
    if left <= idle_s:
        raise _StreamTimeout("The stream reached its longest session (KHULUMA_TRANSCRIPTION_STREAM_MAX_SECONDS).")
    raise _StreamTimeout(f"Nothing was received for {idle_s:g} s (KHULUMA_TRANSCRIPTION_STREAM_IDLE_SECONDS).")


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


CLOSING_STEP_S = 10.0  # a session closed by a graceful stop: at most this long for its last step


async def stream(ctx: AppContext, caller: Principal, websocket: WebSocket, seat: LiveSeat | None = None) -> None:
    """Streaming transcription over a WebSocket (the router authenticated and admitted the caller; ``seat`` is its
    place among the live sessions, which a graceful stop closes); see STREAM_PROTOCOL."""
    await websocket.accept()
    limits = ctx.settings.transcription
    state = _StreamState(websocket.query_params.get("lang_code") or None, limits.stream_send_timeout_seconds)
    limit = _limit_bytes(ctx)
    ends_at = time.monotonic() + limits.stream_max_seconds
    stop = asyncio.ensure_future(seat.stop.wait()) if seat is not None else None
    client: TranscriptionClient | None = None
    try:
        client = _transcription(ctx)
        if state.lang_code:
            await client.check_language(state.lang_code)
        await _send(websocket, state, {"type": "ready", "sample_rate": 16000, "encoding": "pcm_s16le", "channels": 1})
        while True:
            message = await _receive(websocket, limits.stream_idle_seconds, ends_at, stop)
            if message["type"] == "websocket.disconnect":
                await _meter_stream(ctx, caller, state, "failed")
                return
            data, text = message.get("bytes"), message.get("text")
            if data:
                state.buffer += data
                state.total_bytes += len(data)
                state.since_partial += len(data)
                if state.total_bytes > limit:
                    raise TooLarge(f"The stream exceeds the limit of {limit // (1024 * 1024)} MB of audio.")
                if state.since_partial >= PARTIAL_EVERY_SECONDS * BYTES_PER_SECOND:
                    state.since_partial = 0
                    await _stream_step(client, state, websocket, final=False)
            elif text is not None:
                end, config = _is_end(text)
                if config.get("type") == "config" and config.get("lang_code"):
                    state.lang_code = str(config["lang_code"])
                    await client.check_language(state.lang_code)  # before any audio is decoded
                if end:
                    await _finish(client, state, websocket)
                    await _meter_stream(ctx, caller, state, "successful")
                    await websocket.close(code=1000)
                    return
    except _StreamClosing:
        assert client is not None  # only raised from the loop
        await _close_going_away(ctx, caller, client, state, websocket, seat.reason if seat else "")
    except WebSocketDisconnect:
        await _meter_stream(ctx, caller, state, "failed")
    except _StreamTimeout as exc:
        await _meter_stream(ctx, caller, state, "failed")
        await _close_with_error(websocket, str(exc), 4408, wait_s=min(1.0, state.send_timeout_s))
    except DomainError as exc:
        await _meter_stream(ctx, caller, state, "failed")
        await _close_with_error(websocket, _named(exc).detail, _close_code(exc))
    except Exception:
        await _meter_stream(ctx, caller, state, "failed")
        await _close_with_error(websocket, "Internal server error during streaming transcription.", 1011)
        raise
    finally:
        if stop is not None:
            stop.cancel()


async def _finish(client: TranscriptionClient, state: _StreamState, websocket: WebSocket, warning: str = "") -> None:
    """The last step over the audio still pending, then the ``final`` message."""
    if state.buffer:
        await _stream_step(client, state, websocket, final=True)
    await _send(
        websocket,
        state,
        {
            "type": "final",
            "text": state.committed_text(),
            "language_code": state.lang_code or "",
            "audio_length_seconds": round(state.total_bytes / BYTES_PER_SECOND, 3),
            "segments": [s.model_dump() for s in state.segments],
            "warnings": [*state.warnings, warning] if warning else state.warnings,
        },
    )


async def _close_going_away(
    ctx: AppContext,
    caller: Principal,
    client: TranscriptionClient,
    state: _StreamState,
    websocket: WebSocket,
    reason: str,
) -> None:
    """A graceful stop ends the session: the audio received so far is finished and sent as ``final`` (within
    :data:`CLOSING_STEP_S`), then the socket closes with 1001 (going away) and the reason."""
    reason = reason or "The server is shutting down."
    try:
        async with asyncio.timeout(CLOSING_STEP_S):
            await _finish(client, state, websocket, warning=reason)
        await _meter_stream(ctx, caller, state, "successful")
    except (DomainError, TimeoutError, _StreamTimeout, WebSocketDisconnect, RuntimeError):
        await _meter_stream(ctx, caller, state, "failed")
    try:
        async with asyncio.timeout(1.0):
            await websocket.close(code=GOING_AWAY, reason=reason[:120])
    except (RuntimeError, WebSocketDisconnect, TimeoutError):
        pass


def _close_code(exc: DomainError) -> int:
    """WebSocket close code of a domain error: 1008 bad input (a language without a model too), 1009 too much
    audio, 1013 try again later (the model's queue is full), 1011 anything else (the service cannot answer)."""
    if isinstance(exc, TooLarge):
        return 1009
    if isinstance(exc, Overloaded):
        return 1013
    if isinstance(exc, InvalidInput):
        return 1008
    return 1011


async def _meter_stream(ctx: AppContext, caller: Principal, state: _StreamState, status: str) -> None:
    if state.total_bytes or status == "successful":
        await record_usage(ctx, caller, ROUTE_STREAM, status=status, seconds=state.total_bytes / BYTES_PER_SECOND)


async def _close_with_error(websocket: WebSocket, detail: str, code: int, wait_s: float = 10.0) -> None:
    """Say why, then close; within ``wait_s`` (a client that stopped reading may never take the message)."""
    try:
        async with asyncio.timeout(wait_s):
            await websocket.send_json({"type": "error", "detail": detail})
            await websocket.close(code=code, reason=detail[:120])
    except (RuntimeError, WebSocketDisconnect, TimeoutError):
        pass

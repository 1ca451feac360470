"""Synchronous and streaming transcription services (the async v1 jobs live in ``serve_app.services.jobs``).

- :func:`sync_file`: ``POST /api/v2alpha/transcribe/sync/file`` (field ``file``) and ``POST /v1/transcribe/sync``
  (same, plus ``translate``) -> the full transcription record (``contracts.speech.build_record``). Past
  ``transcription.sync_timeout_seconds`` -> 504 (TimedOut).
- :func:`fast`: ``POST /api/v2alpha/transcribe/fast`` (field ``upload``) -> ``{text, lang_code, diarisation}``.
  Past ``transcription.fast_timeout_seconds`` -> 503 (Unavailable: the spec's "request timed out").
- :func:`v1_sync`: ``POST /api/v1/transcribe/sync`` (JSON, base64 ``audio_blob``) -> ``{message, text,
  language_id}``; base64 that does not decode -> 400.
- :func:`stream`: the ``/ws/stream-transcribe`` WebSocket (protocol in :data:`STREAM_PROTOCOL`; the buffer,
  stepping, limits and close codes it shares with the Live API are ``serve_app.services.streaming``).

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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from fastapi import Request, WebSocket

from cluster.transfer import blob_from_bytes, blob_from_file, discard
from contracts.errors import DomainError, InvalidInput, TimedOut, Unavailable, UnsupportedLanguage
from contracts.payloads import Blob
from contracts.speech import (
    TranscribeRequest,
    TranscriptionClient,
    TranscriptionRecord,
    TranscriptionResult,
    build_record,
)
from serve_app.context import AppContext, required
from serve_app.schemas.transcribe import FastTranscription, V1SyncResult
from serve_app.services.jobs import decode_audio_blob  # the v1 base64 body, shared with the v1 upload route
from serve_app.services.streaming import SAMPLE_RATE, StreamState, advance, guard, receive, send
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
                                      4408 a time limit: idle, session length, or a client that stopped reading)
      without lang_code, audio in a language that has no speech model is refused this way (1008) once about
      6 s of speech are in; segments that fail the hallucination guards never appear (a warning says so)
"""


async def _stream_step(client: TranscriptionClient, state: StreamState, websocket: WebSocket, final: bool) -> None:
    advanced = await advance(client, state, final)
    if final:
        return
    for segment in advanced.committed:
        await send(websocket, state, {"type": "segment", **segment.model_dump()})
    text = (state.committed_text() + " " + advanced.pending_text).strip()
    await send(
        websocket,
        state,
        {
            "type": "partial",
            "text": text,
            "pending_text": advanced.pending_text,
            "language_code": state.lang_code if state.lang_code else advanced.step.language_code,
            "audio_seconds": round(state.audio_seconds, 3),
            "warnings": advanced.step.warnings,
        },
    )


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


async def stream(ctx: AppContext, caller: Principal, websocket: WebSocket) -> None:
    """Streaming transcription over a WebSocket (the router authenticated the caller); see STREAM_PROTOCOL."""
    await websocket.accept()
    limits = ctx.settings.transcription
    state = StreamState(websocket.query_params.get("lang_code") or None, limits.stream_send_timeout_seconds)

    async def meter(status: str) -> None:
        if state.total_bytes or status == "successful":
            await record_usage(ctx, caller, ROUTE_STREAM, status=status, seconds=state.audio_seconds)

    await guard(
        websocket,
        state,
        _stream_session(ctx, websocket, state, meter),
        meter,
        lambda detail, _code: {"type": "error", "detail": detail},
        _named,
    )


async def _stream_session(
    ctx: AppContext, websocket: WebSocket, state: StreamState, meter: Callable[[str], Awaitable[None]]
) -> None:
    limits = ctx.settings.transcription
    limit = _limit_bytes(ctx)
    ends_at = time.monotonic() + limits.stream_max_seconds
    client = _transcription(ctx)
    if state.lang_code:
        await client.check_language(state.lang_code)
    await send(websocket, state, {"type": "ready", "sample_rate": SAMPLE_RATE, "encoding": "pcm_s16le", "channels": 1})
    while True:
        message = await receive(websocket, limits.stream_idle_seconds, ends_at)
        data, text = message.get("bytes"), message.get("text")
        if data:
            if state.add_audio(data, limit):
                await _stream_step(client, state, websocket, final=False)
        elif text is not None:
            end, config = _is_end(text)
            if config.get("type") == "config" and config.get("lang_code"):
                state.lang_code = str(config["lang_code"])
                await client.check_language(state.lang_code)  # before any audio is decoded
            if end:
                if state.buffer:
                    await _stream_step(client, state, websocket, final=True)
                seconds = round(state.audio_seconds, 3)
                await send(
                    websocket,
                    state,
                    {
                        "type": "final",
                        "text": state.committed_text(),
                        "language_code": state.lang_code or "",
                        "audio_length_seconds": seconds,
                        "segments": [s.model_dump() for s in state.segments],
                        "warnings": state.warnings,
                    },
                )
                await meter("successful")
                await websocket.close(code=1000)
                return

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
without reading the rest) and are deleted after the answer; the Speech replica (on any node) receives the
bytes as a ``Blob``: inline when small, else through object storage (``cluster/transfer.py``). Every
transcription records one usage row (seconds of audio, successful or failed). Language errors come from the
deployment without a field name; this module names the request field (``lang_code``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import anyio
from fastapi import Request, WebSocket
from starlette.websockets import WebSocketDisconnect

from cluster.transfer import blob_from_bytes, blob_from_file, discard
from contracts.errors import DomainError, InvalidInput, Overloaded, TimedOut, Unavailable, UnsupportedLanguage
from contracts.payloads import Blob
from contracts.speech import (
    FastTranscription,
    SpeechClient,
    TranscribeRequest,
    TranscriptionRecord,
    TranscriptionResult,
    V1SyncResult,
    build_record,
)
from serve_app.admission import LiveSeat
from serve_app.context import AppContext, required
from serve_app.lifecycle import GOING_AWAY
from serve_app.services.jobs import decode_audio_blob  # the v1 base64 body, shared with the v1 upload route
from serve_app.services.streaming import SAMPLE_RATE, StreamState, StreamTimeout, advance, guard, receive, send
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


def _transcription(ctx: AppContext) -> SpeechClient:
    return required(ctx.clients.speech, "transcription")


def _named(exc: DomainError, field: str = LANGUAGE_FIELD) -> DomainError:
    """The error as the client sees it: a language error names the request field."""
    return exc.for_field(field) if isinstance(exc, UnsupportedLanguage) else exc


@dataclass
class Options:
    """What a file transcription route asks for (from its query or its form)."""

    language: str | None = None
    diarise: bool = False
    detect_music: bool = False
    translate: bool = False
    language_field: str = LANGUAGE_FIELD  # the request field that carried ``language``, named in its errors


@dataclass(frozen=True)
class Transcribed:
    """A transcribed upload: the file's facts (its spool file is gone) and what transcribing it produced."""

    upload: SavedUpload
    result: TranscriptionResult


async def _transcribe(
    ctx: AppContext,
    caller: Principal,
    route: str,
    request: TranscribeRequest,
    *,
    timeout: float,
    on_timeout: type[DomainError],
    started: float,
    language_field: str = LANGUAGE_FIELD,
    accept: Callable[[TranscriptionResult], None] | None = None,
) -> TranscriptionResult:
    """Run the transcription with a deadline and meter the call (successful or failed). ``on_timeout``: the
    route's answer past the deadline (TimedOut on the sync routes, Unavailable on the fast route). ``accept`` may
    refuse a result the route cannot answer with (raising a domain error): the call is metered as failed."""
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
            raise _named(exc, language_field) from None
        if accept is not None:
            accept(result)
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


OptionsOf = Callable[[SavedUpload], Options | Awaitable[Options]]  # a route's options, read from its upload


async def _chosen(options: OptionsOf, upload: SavedUpload) -> Options:
    chosen = options(upload)
    return await chosen if inspect.isawaitable(chosen) else chosen


@dataclass(frozen=True)
class FileRoute:
    """A file transcription route: its usage name, its multipart file field and how it reads its options."""

    route: str
    field: str
    options: OptionsOf


async def _received(
    ctx: AppContext, caller: Principal, request: Request, via: FileRoute
) -> tuple[SavedUpload, Options]:
    """The upload spooled to disk and the route's options read from it (a bad one is a failed invocation)."""
    receiving = receive_file(request, via.field, _limit_bytes(ctx), _uploads(ctx))
    upload = await _metered(ctx, caller, via.route, receiving)
    try:
        return upload, await _metered(ctx, caller, via.route, _chosen(via.options, upload))
    except BaseException:
        await anyio.to_thread.run_sync(upload.delete)
        raise


async def transcribe_upload(
    ctx: AppContext,
    caller: Principal,
    request: Request,
    via: FileRoute,
    *,
    timeout: float,
    on_timeout: type[DomainError] = TimedOut,
    accept: Callable[[TranscriptionResult], None] | None = None,
) -> Transcribed:
    """THE file transcription of the routes: the multipart file spooled to disk (413 before the rest is read), the
    options read from the upload (its text parts) or the query, the transcription within ``timeout``, metered;
    the spool file and any object the audio travelled through are gone when this returns."""
    started = time.monotonic()
    await ctx.admission.check_audio(caller)  # the customer's audio of the day: 429 before the upload is read
    upload, chosen = await _received(ctx, caller, request, via)
    audio = None
    try:
        audio = await _metered(ctx, caller, via.route, _blob(ctx, upload))
        result = await _transcribe(
            ctx,
            caller,
            via.route,
            TranscribeRequest(
                audio=audio,
                file_name=upload.filename,
                language=chosen.language or None,
                diarise=chosen.diarise,
                detect_music=chosen.detect_music,
                translate=chosen.translate,
            ),
            timeout=timeout,
            on_timeout=on_timeout,
            started=started,
            language_field=chosen.language_field,
            accept=accept,
        )
    finally:
        await _release(ctx, upload, audio)
    return Transcribed(upload, result)


async def check_upload(
    ctx: AppContext, caller: Principal, request: Request, via: FileRoute
) -> tuple[SavedUpload, Options]:
    """A dry run of :func:`transcribe_upload`: the upload and its options checked (the language normalised, or
    400 when it is unknown or has no model here), nothing transcribed and nothing metered but a refusal."""
    upload, chosen = await _received(ctx, caller, request, via)
    await anyio.to_thread.run_sync(upload.delete)
    if chosen.language:
        try:
            code = await _metered(ctx, caller, via.route, _transcription(ctx).check_language(chosen.language))
        except UnsupportedLanguage as exc:
            raise _named(exc, chosen.language_field) from None
        chosen = replace(chosen, language=code)
    return upload, chosen


def record_of(done: Transcribed, caller: Principal) -> TranscriptionRecord:
    """The transcription record of a sync upload (``contracts.speech.build_record``), owned by the caller."""
    return build_record(
        done.result,
        id=str(uuid.uuid4()),
        customer_id=caller.customer_id,
        project_id=caller.project_id,
        keychain_id=caller.token_id,
        blob_name=done.upload.filename,
        upload_file_size=done.upload.size,
    )


async def sync_file(
    ctx: AppContext,
    caller: Principal,
    request: Request,
    lang_code: str | None,
    diarise: bool,
    detect_music: bool,
    translate: bool = False,
) -> TranscriptionRecord:
    route = ROUTE_API_SYNC if translate else ROUTE_SYNC
    via = FileRoute(route, "file", lambda _: Options(lang_code, diarise, detect_music, translate))
    done = await transcribe_upload(ctx, caller, request, via, timeout=ctx.settings.transcription.sync_timeout_seconds)
    return record_of(done, caller)


async def fast(ctx: AppContext, caller: Principal, request: Request, lang_code: str | None) -> FastTranscription:
    result = (
        await transcribe_upload(
            ctx,
            caller,
            request,
            FileRoute(ROUTE_FAST, "upload", lambda _: Options(lang_code)),
            timeout=ctx.settings.transcription.fast_timeout_seconds,
            on_timeout=Unavailable,
        )
    ).result
    return FastTranscription(
        text=result.text,
        lang_code=result.language_code,
        diarisation={},
        words=result.words,
        warnings=result.warnings,
        audio_length_seconds=result.audio_length_seconds,
    )


async def _blob(ctx: AppContext, upload: SavedUpload) -> Blob:
    """The spooled upload as the Speech replica will receive it (inline, or via object storage)."""
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


async def _stream_step(client: SpeechClient, state: StreamState, websocket: WebSocket, final: bool) -> None:
    advanced = await advance(client, state, final)
    if final:
        return
    notices = [(s.start_time, {"type": "segment", **s.model_dump()}) for s in advanced.committed]
    notices += [(w.start_time, {"type": "withheld", **w.model_dump()}) for w in advanced.withheld]
    for _, message in sorted(notices, key=lambda pair: pair[0]):
        await send(websocket, state, message)
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


async def stream(ctx: AppContext, caller: Principal, websocket: WebSocket, seat: LiveSeat | None = None) -> None:
    """Streaming transcription over a WebSocket (the router authenticated and admitted the caller; ``seat`` is its
    place among the live sessions, which a graceful stop closes); see STREAM_PROTOCOL."""
    await websocket.accept()
    limits = ctx.settings.transcription
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
                await _finish(_transcription(ctx), state, websocket, warning=reason)
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
        _named,
        closing,
    )


CLOSING_STEP_S = 10.0  # a session closed by a graceful stop: at most this long for its last step


async def _finish(client: SpeechClient, state: StreamState, websocket: WebSocket, warning: str = "") -> None:
    """The last step over the audio still pending, then the ``final`` message."""
    if state.has_new_audio:
        await _stream_step(client, state, websocket, final=True)
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
    limits = ctx.settings.transcription
    limit = _limit_bytes(ctx)
    ends_at = time.monotonic() + limits.stream_max_seconds
    client = _transcription(ctx)
    if state.lang_code:
        await client.check_language(state.lang_code)
    await send(websocket, state, {"type": "ready", "sample_rate": SAMPLE_RATE, "encoding": "pcm_s16le", "channels": 1})
    while True:
        message = await receive(websocket, limits.stream_idle_seconds, ends_at, stop)
        data, text = message.get("bytes"), message.get("text")
        if data:
            if state.add_audio(data, limit):
                await _stream_step(client, state, websocket, final=False)
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

"""Synchronous and streaming transcription services (the async v1 jobs live in ``serve_app.services.jobs``).

- :func:`sync_file`: ``POST /api/v2alpha/transcribe/sync/file`` (field ``file``) and ``POST /v1/transcribe/sync``
  (same, plus ``translate``) -> the full transcription record. Past ``sync_timeout_seconds`` -> 504.
- :func:`fast`: ``POST /api/v2alpha/transcribe/fast`` (field ``upload``) -> ``{text, lang_code, diarisation}``.
  Past ``fast_timeout_seconds`` -> 503 (the spec's "request timed out").
- :func:`v1_sync`: ``POST /api/v1/transcribe/sync`` (JSON, base64 ``audio_blob``) -> ``{message, text,
  language_id}``; base64 that does not decode -> 400.
- :func:`stream`: the ``/ws/stream-transcribe`` WebSocket (protocol in :data:`STREAM_PROTOCOL`).

Uploads stream to ``<data_dir>/uploads`` (413 beyond ``max_request_mb`` without reading the rest) and are deleted
after the answer. Every transcription records one usage row (seconds of audio, successful or failed).
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

from serve_app.context import AppContext
from contracts.errors import DomainError, InvalidInput, TimedOut, TooLarge, Unavailable
from serve_app.services.usage import record_usage
from serve_app.tokens import Principal
from serve_app.uploads import receive_file, sanitize_filename

ROUTE_SYNC = "transcribe_sync"
ROUTE_API_SYNC = "transcribe_api_sync"
ROUTE_FAST = "transcribe_fast"
ROUTE_V1_SYNC = "transcribe_v1_sync"
ROUTE_STREAM = "transcribe_stream"
T = TypeVar("T")
_GRACE_SECONDS = 2.0  # the engine stops itself at the deadline; the outer guard waits a little longer


def _limit_bytes(ctx: AppContext) -> int:
    return int(ctx.settings.max_request_mb * 1024 * 1024)


def _uploads(ctx: AppContext) -> Path:
    return ctx.settings.data_dir / "uploads"


async def _transcribe(ctx: AppContext, caller: Principal, route: str, path: Path, *, lang_code: str | None,
                      diarise: bool = False, detect_music: bool = False, translate: bool = False,
                      timeout: float, on_timeout: type[DomainError], started: float) -> dict[str, Any]:
    """Run the transcription backend with a deadline and meter the call (successful or failed)."""
    backend = ctx.backends.require("transcription")
    remaining = max(0.1, timeout - (time.monotonic() - started))
    message = (f"Transcription did not finish within the {timeout:g} s limit; send shorter audio or use the "
               f"asynchronous upload/process routes.")
    try:
        try:
            record = await asyncio.wait_for(
                backend.transcribe(str(path), lang_code, diarise, detect_music, translate, remaining),
                remaining + _GRACE_SECONDS)
        except (asyncio.TimeoutError, TimedOut):
            raise on_timeout(message) from None
    except Exception:
        await record_usage(ctx, caller, route, status="failed")
        raise
    await record_usage(ctx, caller, route, seconds=float(record.get("audio_length_seconds") or 0.0))
    return record


async def _metered(ctx: AppContext, caller: Principal, route: str, receiving: Awaitable[T]) -> T:
    """Await the upload step; a rejected upload (400/413/415) is metered as a failed invocation."""
    try:
        return await receiving
    except DomainError:
        await record_usage(ctx, caller, route, status="failed")
        raise


def _record(record: dict[str, Any], caller: Principal, filename: str, size: int) -> dict[str, Any]:
    """The engine's record plus the fields the service owns (ids, names)."""
    return {**record, "id": str(uuid.uuid4()), "customer_id": caller.customer_id, "project_id": caller.project_id,
            "keychain_id": caller.token_id, "blob_name": filename, "upload_file_size": size}


async def sync_file(ctx: AppContext, caller: Principal, request: Request, lang_code: str | None, diarise: bool,
                    detect_music: bool, translate: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    route = ROUTE_API_SYNC if translate else ROUTE_SYNC
    upload = await _metered(ctx, caller, route, receive_file(request, "file", _limit_bytes(ctx), _uploads(ctx)))
    try:
        record = await _transcribe(ctx, caller, route, upload.path,
                                   lang_code=lang_code or None, diarise=diarise, detect_music=detect_music,
                                   translate=translate, timeout=ctx.settings.transcription.sync_timeout_seconds,
                                   on_timeout=TimedOut, started=started)
    finally:
        await anyio.to_thread.run_sync(upload.delete)
    return _record(record, caller, upload.filename, upload.size)


async def fast(ctx: AppContext, caller: Principal, request: Request, lang_code: str | None) -> dict[str, Any]:
    started = time.monotonic()
    upload = await _metered(ctx, caller, ROUTE_FAST,
                            receive_file(request, "upload", _limit_bytes(ctx), _uploads(ctx)))
    try:
        record = await _transcribe(ctx, caller, ROUTE_FAST, upload.path, lang_code=lang_code or None,
                                   timeout=ctx.settings.transcription.fast_timeout_seconds, on_timeout=Unavailable,
                                   started=started)
    finally:
        await anyio.to_thread.run_sync(upload.delete)
    return {"text": record["transcription_text"], "lang_code": record["language_code"], "diarisation": {},
            "words": record.get("words", []), "warnings": record.get("warnings", []),
            "audio_length_seconds": record.get("audio_length_seconds")}


def _write_blob(ctx: AppContext, file_name: str, audio_blob: str) -> Path:
    from serve_app.services.jobs import decode_audio_blob

    data = decode_audio_blob(audio_blob, _limit_bytes(ctx))
    folder = _uploads(ctx)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"v1-{uuid.uuid4().hex}-{sanitize_filename(file_name, default='audio')}"
    path.write_bytes(data)
    return path


async def v1_sync(ctx: AppContext, caller: Principal, file_name: str, audio_blob: str) -> dict[str, Any]:
    started = time.monotonic()
    path = await _metered(ctx, caller, ROUTE_V1_SYNC, anyio.to_thread.run_sync(_write_blob, ctx, file_name,
                                                                             audio_blob))
    try:
        record = await _transcribe(ctx, caller, ROUTE_V1_SYNC, path, lang_code=None,
                                   timeout=ctx.settings.transcription.sync_timeout_seconds, on_timeout=TimedOut,
                                   started=started)
    finally:
        await anyio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))
    return {"message": "Transcription successful.", "text": record["transcription_text"],
            "language_id": record["language_code"]}


# ------------------------------------------------------------------------------------------------ streaming

STREAM_PROTOCOL = """\
WebSocket /ws/stream-transcribe  (token: X-CLIENT-TOKEN header or ?token=; optional ?lang_code=)

client -> server
  binary frames   raw PCM, signed 16-bit little-endian, 16 kHz, mono (any frame size)
  text {"type": "config", "lang_code": "eng"}   optional, before the audio
  text "EOS" or {"type": "end"}                 end of audio: the server answers "final" and closes (1000)

server -> client (JSON text frames)
  {"type": "ready", "sample_rate": 16000, "encoding": "pcm_s16le", "channels": 1}
  {"type": "partial", "text": ..., "pending_text": ..., "language_code": ..., "audio_seconds": ...}
      after every ~2 s of new audio: everything so far; the pending part may still change
  {"type": "segment", "start_time", "end_time", "text", "words": [...]}
      a segment that will not change any more (ended in a pause)
  {"type": "final", "text", "language_code", "audio_length_seconds", "segments": [...]}
  {"type": "error", "detail": ...}    then close (1008 bad input, 1009 too much audio, 1011 server error)
"""

BYTES_PER_SECOND = 32_000  # 16 kHz x 2 bytes
PARTIAL_EVERY_SECONDS = 2.0
COMMIT_AFTER_SECONDS = 8.0  # beyond this much pending audio, finished segments are committed
MAX_PENDING_SECONDS = 28.0  # never keep more than this uncommitted (Whisper's window is 30 s)


class _StreamState:
    def __init__(self, lang_code: str | None) -> None:
        self.lang_code = lang_code
        self.buffer = bytearray()
        self.offset = 0.0  # seconds of audio before the buffer
        self.total_bytes = 0
        self.since_partial = 0
        self.segments: list[dict[str, Any]] = []

    @property
    def pending_seconds(self) -> float:
        return len(self.buffer) / BYTES_PER_SECOND

    def committed_text(self) -> str:
        return " ".join(s["text"] for s in self.segments if s["text"]).strip()


async def _stream_step(ctx: AppContext, state: _StreamState, websocket: WebSocket, final: bool) -> None:
    backend = ctx.backends.require("transcription")
    commit_before = None
    if not final and state.pending_seconds > COMMIT_AFTER_SECONDS:
        commit_before = state.pending_seconds - 1.0
    result = await backend.transcribe_pcm(bytes(state.buffer), state.lang_code, state.offset, commit_before)
    if state.lang_code is None and result.get("language_code"):
        state.lang_code = result["language_code"]  # keep the detected language for the whole session
    committed = list(result["final"])
    cut = float(result.get("cut_seconds") or 0.0)
    if final or (not cut and state.pending_seconds > MAX_PENDING_SECONDS):
        committed += result["pending"]  # end of audio, or no pause for too long: take what we have
        cut, pending_text = state.pending_seconds, ""
    else:
        pending_text = result.get("pending_text", "")
    for segment in committed:
        state.segments.append(segment)
        if not final:
            await websocket.send_json({"type": "segment", **segment})
    if cut:
        drop = min(len(state.buffer), int(cut * 16_000) * 2)
        del state.buffer[:drop]
        state.offset += drop / BYTES_PER_SECOND
    if not final:
        text = (state.committed_text() + " " + pending_text).strip()
        await websocket.send_json({"type": "partial", "text": text, "pending_text": pending_text,
                                   "language_code": state.lang_code,
                                   "audio_seconds": round(state.total_bytes / BYTES_PER_SECOND, 3)})


def _is_end(text: str) -> tuple[bool, dict[str, Any]]:
    if text.strip() == "EOS":
        return True, {}
    try:
        message = json.loads(text)
    except ValueError:
        raise InvalidInput("Text frames must be \"EOS\" or JSON like {\"type\": \"end\"}.") from None
    if not isinstance(message, dict):
        raise InvalidInput("Text frames must be JSON objects.")
    return message.get("type") in ("end", "eos", "EOS"), message


async def stream(ctx: AppContext, caller: Principal, websocket: WebSocket) -> None:
    """Streaming transcription over a WebSocket (the router authenticated the caller); see STREAM_PROTOCOL."""
    await websocket.accept()
    state = _StreamState(websocket.query_params.get("lang_code") or None)
    limit = _limit_bytes(ctx)
    try:
        backend = ctx.backends.require("transcription")
        if state.lang_code:
            await _check_language(backend, state.lang_code)
        await websocket.send_json({"type": "ready", "sample_rate": 16000, "encoding": "pcm_s16le", "channels": 1})
        while True:
            message = await websocket.receive()
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
                    await _stream_step(ctx, state, websocket, final=False)
            elif text is not None:
                end, config = _is_end(text)
                if config.get("type") == "config" and config.get("lang_code"):
                    state.lang_code = str(config["lang_code"])
                    await _check_language(backend, state.lang_code)
                if end:
                    if state.buffer:
                        await _stream_step(ctx, state, websocket, final=True)
                    seconds = round(state.total_bytes / BYTES_PER_SECOND, 3)
                    await websocket.send_json({"type": "final", "text": state.committed_text(),
                                               "language_code": state.lang_code or "",
                                               "audio_length_seconds": seconds, "segments": state.segments})
                    await _meter_stream(ctx, caller, state, "successful")
                    await websocket.close(code=1000)
                    return
    except WebSocketDisconnect:
        await _meter_stream(ctx, caller, state, "failed")
    except DomainError as exc:
        code = {400: 1008, 413: 1009}.get(exc.status_code, 1011)
        await _meter_stream(ctx, caller, state, "failed")
        await _close_with_error(websocket, exc.detail, code)
    except Exception:  # noqa: BLE001 - report and close rather than drop the socket silently
        await _meter_stream(ctx, caller, state, "failed")
        await _close_with_error(websocket, "Internal server error during streaming transcription.", 1011)
        raise


async def _check_language(backend: Any, lang_code: str) -> None:
    """400 (closing the socket with 1008) for a language without a model, before any audio is sent."""
    await backend.check_language(lang_code)


async def _meter_stream(ctx: AppContext, caller: Principal, state: _StreamState, status: str) -> None:
    if state.total_bytes or status == "successful":
        await record_usage(ctx, caller, ROUTE_STREAM, status=status,
                           seconds=state.total_bytes / BYTES_PER_SECOND)


async def _close_with_error(websocket: WebSocket, detail: str, code: int) -> None:
    try:
        await websocket.send_json({"type": "error", "detail": detail})
        await websocket.close(code=code, reason=detail[:120])
    except (RuntimeError, WebSocketDisconnect):
        pass

"""File transcription: one uploaded file, transcribed within a time limit and metered (live transcription is
``serve_app.services.live``; the async v1 jobs ``serve_app.services.jobs``).

Every file route does the same two things, each once:

1. ``async with file_transcription(ctx, caller, request, route, field) as job``: the customer's audio of the day
   is checked (429 before the body is read), the multipart file is spooled to ``<data_dir>/uploads`` on the
   ingress's own node (413 beyond ``max_request_mb`` without reading the rest), the route reads its own options
   (from its query, or from the upload's text parts: ``job.upload.first("language")``), and on the way out the
   call is metered once (successful with the seconds of audio, or failed: a refused upload, a bad option, a
   failed transcription, a result the route cannot answer with) and the spool file is gone;
2. ``await job.transcribe(language=..., timeout=...)``: the Speech replica (on any node) receives the bytes as a
   ``Blob``: inline when small, else through object storage (``cluster/transfer.py``), gone after the answer.
   Language errors come from the deployment without a field name; this names the request field.

The routes here:

- :func:`sync_file`: ``POST /api/v2alpha/transcribe/sync/file`` (field ``file``) and ``POST /v1/transcribe/sync``
  (same, plus ``translate``) -> the full transcription record (``contracts.speech.build_record``). Past
  ``speech.sync_timeout_seconds`` -> 504 (TimedOut).
- :func:`fast`: ``POST /api/v2alpha/transcribe/fast`` (field ``upload``) -> ``{text, lang_code, diarisation}``.
  Past ``speech.fast_timeout_seconds`` -> 503 (Unavailable: the spec's "request timed out").
- :func:`v1_sync`: ``POST /api/v1/transcribe/sync`` (JSON, base64 ``audio_blob``) -> ``{message, text,
  language_id}``; base64 that does not decode -> 400.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import Request

from cluster.transfer import blob_from_bytes, blob_from_file, discard
from contracts.errors import DomainError, NotDeployed, Overloaded, TimedOut, Unavailable, UnsupportedLanguage
from contracts.payloads import Blob
from contracts.speech import (
    FastTranscription,
    TranscribeRequest,
    TranscriptionRecord,
    TranscriptionResult,
    V1SyncResult,
    build_record,
)
from serve_app.context import AppContext, speech_client
from serve_app.services.jobs import decode_audio_blob  # the v1 base64 body, shared with the v1 upload route
from serve_app.services.usage import record_usage
from serve_app.tokens import Principal
from serve_app.uploads import SavedUpload, receive_file, sanitize_filename

ROUTE_SYNC = "transcribe_sync"
ROUTE_API_SYNC = "transcribe_api_sync"
ROUTE_FAST = "transcribe_fast"
ROUTE_V1_SYNC = "transcribe_v1_sync"
LANGUAGE_FIELD = "lang_code"  # the request field that carries the language on the native routes
_GRACE_SECONDS = 2.0  # the engine stops itself at the deadline; the outer guard waits a little longer


def _limit_bytes(ctx: AppContext) -> int:
    return int(ctx.settings.max_request_mb * 1024 * 1024)


class Transcription:
    """One metered file transcription: its audio (a spooled ``upload``, or the bytes of a v1 body as ``audio``)
    and, once :meth:`transcribe` ran, its ``result``."""

    def __init__(self, ctx: AppContext, upload: SavedUpload | None = None, file_name: str = "audio") -> None:
        self.ctx, self.upload = ctx, upload
        self.file_name = upload.filename if upload else file_name  # the decoder's format hint
        self.audio: Blob | None = None
        self.result: TranscriptionResult | None = None
        self.started = time.monotonic()

    async def check_language(self, language: str, field: str = LANGUAGE_FIELD) -> str:
        """``language`` normalised, or 400 naming ``field`` when it is unknown or has no model here."""
        try:
            return await speech_client(self.ctx).check_language(language)
        except UnsupportedLanguage as exc:
            raise exc.for_field(field) from None

    async def transcribe(
        self,
        *,
        timeout: float,
        language: str | None = None,
        diarise: bool = False,
        detect_music: bool = False,
        translate: bool = False,
        language_field: str = LANGUAGE_FIELD,
        on_timeout: type[DomainError] = TimedOut,
    ) -> TranscriptionResult:
        """The audio transcribed within ``timeout`` seconds of the call's start; ``on_timeout``: the route's answer
        past it (TimedOut on the sync routes, Unavailable on the fast route)."""
        if self.audio is None:
            assert self.upload is not None
            upload = self.upload
            self.audio = await anyio.to_thread.run_sync(blob_from_file, self.ctx.settings, upload.path, upload.filename)
        request = TranscribeRequest(
            audio=self.audio,
            file_name=self.file_name,
            language=language or None,
            diarise=diarise,
            detect_music=detect_music,
            translate=translate,
        )
        remaining = max(0.1, timeout - (time.monotonic() - self.started))
        try:
            self.result = await asyncio.wait_for(
                speech_client(self.ctx).transcribe(request.model_copy(update={"timeout_s": remaining})),
                remaining + _GRACE_SECONDS,
            )
        except (TimeoutError, TimedOut):  # asyncio.wait_for's timeout is the builtin TimeoutError
            raise on_timeout(
                f"Transcription did not finish within the {timeout:g} s limit; send shorter audio or use the "
                f"asynchronous upload/process routes."
            ) from None
        except UnsupportedLanguage as exc:
            raise exc.for_field(language_field) from None
        return self.result


@asynccontextmanager
async def metered(ctx: AppContext, caller: Principal, route: str, job: Transcription) -> AsyncIterator[Transcription]:
    """Meter ``job`` once when the route is done with it: successful with its seconds of audio when it was
    transcribed and answered, failed when anything raised (nothing when a refusal came before any work: a full
    queue, or a dry run that transcribed nothing), and release the audio."""
    try:
        yield job
    except (Overloaded, NotDeployed):
        raise  # refused before any work (a full queue, no Speech deployment): not a failed invocation
    except BaseException:
        await record_usage(ctx, caller, route, status="failed")
        raise
    else:
        if job.result is not None:
            await record_usage(ctx, caller, route, seconds=job.result.audio_length_seconds)
    finally:
        if job.upload is not None:
            await anyio.to_thread.run_sync(job.upload.delete)
        if job.audio is not None:
            await anyio.to_thread.run_sync(discard, ctx.settings, job.audio)


@asynccontextmanager
async def file_transcription(
    ctx: AppContext, caller: Principal, request: Request, route: str, field: str = "file"
) -> AsyncIterator[Transcription]:
    """THE file transcription of the routes (see the module docstring): the upload received, then the route's
    body (its options, one :meth:`Transcription.transcribe`), metered once, with nothing left behind."""
    await ctx.admission.customers.check_audio(caller)  # the customer's audio of the day: 429 before the upload is read
    try:
        upload = await receive_file(request, field, _limit_bytes(ctx), ctx.settings.data_dir / "uploads")
    except DomainError:
        await record_usage(ctx, caller, route, status="failed")
        raise
    async with metered(ctx, caller, route, Transcription(ctx, upload)) as job:
        yield job


def record_of(job: Transcription, caller: Principal) -> TranscriptionRecord:
    """The transcription record of a sync upload (``contracts.speech.build_record``), owned by the caller."""
    assert job.result is not None and job.upload is not None
    return build_record(
        job.result,
        id=str(uuid.uuid4()),
        customer_id=caller.customer_id,
        project_id=caller.project_id,
        keychain_id=caller.token_id,
        blob_name=job.upload.filename,
        upload_file_size=job.upload.size,
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
    async with file_transcription(ctx, caller, request, route) as job:
        await job.transcribe(
            timeout=ctx.settings.speech.sync_timeout_seconds,
            language=lang_code,
            diarise=diarise,
            detect_music=detect_music,
            translate=translate,
        )
        return record_of(job, caller)


async def fast(ctx: AppContext, caller: Principal, request: Request, lang_code: str | None) -> FastTranscription:
    async with file_transcription(ctx, caller, request, ROUTE_FAST, "upload") as job:
        result = await job.transcribe(
            timeout=ctx.settings.speech.fast_timeout_seconds, language=lang_code, on_timeout=Unavailable
        )
    return FastTranscription(
        text=result.text,
        lang_code=result.language_code,
        diarisation={},
        words=result.words,
        warnings=result.warnings,
        audio_length_seconds=result.audio_length_seconds,
    )


def _decoded_blob(ctx: AppContext, file_name: str, audio_blob: str) -> Blob:
    data = decode_audio_blob(audio_blob, _limit_bytes(ctx))
    return blob_from_bytes(ctx.settings, data, sanitize_filename(file_name, default="audio"))


async def v1_sync(ctx: AppContext, caller: Principal, file_name: str, audio_blob: str) -> V1SyncResult:
    await ctx.admission.customers.check_audio(caller)
    name = sanitize_filename(file_name, default="audio")
    async with metered(ctx, caller, ROUTE_V1_SYNC, Transcription(ctx, file_name=name)) as job:
        job.audio = await anyio.to_thread.run_sync(_decoded_blob, ctx, file_name, audio_blob)
        result = await job.transcribe(timeout=ctx.settings.speech.sync_timeout_seconds)
    return V1SyncResult(message="Transcription successful.", text=result.text, language_id=result.language_code)

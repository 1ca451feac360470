"""Utility routes: version metadata, favicon, health probes, the models listing, and the streaming WebSocket."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Response, WebSocket
from fastapi.responses import FileResponse, JSONResponse

from contracts.errors import DomainError
from contracts.meta import Health, Metadata, ModelsListing
from serve_app.auth import Caller, Ctx, admit_live_session
from serve_app.errors import refuse_websocket
from serve_app.services import meta
from serve_app.services import speech as speech_service

router = APIRouter(tags=["utility"])
_FAVICON = Path(__file__).resolve().parent.parent / "static" / "favicon.ico"


@router.get("/_meta/version", response_model=Metadata)
async def version(ctx: Ctx) -> Metadata:
    return meta.metadata(ctx)


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> FileResponse:
    return FileResponse(_FAVICON, media_type="image/x-icon")


@router.get("/api/v1/health", response_model=Health)
@router.get("/health", response_model=Health)
async def health(ctx: Ctx) -> JSONResponse:
    """Deployment probe: 200 when every deployment answers, 503 (same body) when any does not, and 503 with status
    ``draining`` during a graceful stop (load balancers stop sending)."""
    body = await meta.health(ctx)
    # a healthy entry carries no "detail" key at all
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if body.status == "ok" else 503)


@router.get("/api/v1/models", response_model=ModelsListing)
async def models(ctx: Ctx) -> ModelsListing:
    """Per capability: the model really loaded and the languages it really covers."""
    return await meta.models(ctx)


@router.get(
    "/ws/stream-transcribe",
    response_class=Response,
    responses={200: {"description": "The token is accepted: an empty body."}},
)
async def stream_auth(caller: Caller) -> Response:
    """Checks the token before a streaming connection is opened; success with no data (an empty 200, as the spec
    and the SDK flows expect; the WebSocket itself is the same path)."""
    return Response(status_code=200)


@router.websocket("/ws/stream-transcribe")
async def stream_transcribe(websocket: WebSocket, ctx: Ctx) -> None:
    """Streaming transcription. Authenticates (X-CLIENT-TOKEN header or `token` query) and admits (the customer's
    limits, this server's live sessions, no graceful stop under way) before accepting: a refusal is the HTTP answer
    to the upgrade (401, 429 or 503 with Retry-After)."""
    token = websocket.headers.get("x-client-token") or websocket.query_params.get("token")
    try:
        caller, seat = await admit_live_session(ctx, websocket, token)
    except DomainError as exc:
        await refuse_websocket(websocket, exc)
        return
    try:
        await speech_service.stream(ctx, caller, websocket, seat)
    finally:
        await ctx.admission.live.release(seat)

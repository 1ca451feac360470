"""The Live API: ``POST /v1/realtime/client_secrets`` mints a short-lived secret with an API token; the
``/v1/realtime`` WebSocket, opened with that secret in its subprotocols, streams audio in and transcript deltas out
(protocol: ``serve_app.services.realtime.PROTOCOL``, docs/speech.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, WebSocket

from contracts.errors import DomainError
from contracts.realtime import ClientSecret, ClientSecretRequest
from serve_app.auth import AnyCaller, Ctx, admit_live_principal, authenticate
from serve_app.errors import refuse_websocket
from serve_app.services import realtime as service

router = APIRouter(tags=["live"])


@router.post("/v1/realtime/client_secrets", response_model=ClientSecret)
async def client_secrets(
    caller: AnyCaller, ctx: Ctx, body: Annotated[ClientSecretRequest | None, Body()] = None
) -> ClientSecret:
    """A client secret for one Live API session: single use, short-lived
    (`KHULUMA_TRANSCRIPTION_REALTIME_SECRET_SECONDS`), bound to this token's customer and project and to the
    session configuration. Hand it to the browser or app instead of the token."""
    return await service.mint(ctx, caller, body)


@router.websocket("/v1/realtime")
async def realtime(websocket: WebSocket, ctx: Ctx) -> None:
    """Live transcription (and translation). The client secret comes in the subprotocols and is checked, and used
    up, before the connection is accepted."""
    token = websocket.headers.get("x-client-token")
    try:
        asserted = await authenticate(ctx, token) if token else None
        live = await service.authorise(ctx, list(websocket.scope.get("subprotocols") or []), asserted)
        # the secret's minter is admitted as on /ws/stream-transcribe: requests per minute, audio of the day, seats
        seat = await admit_live_principal(ctx, websocket, live.principal)
    except DomainError as exc:
        await refuse_websocket(websocket, exc)
        return
    try:
        await service.session(ctx, live, websocket)
    finally:
        await ctx.admission.live.release(seat)

"""Live transcription: the two WebSocket protocols.

- ``/ws/stream-transcribe`` (the spec's route): ``GET`` checks the token before a streaming connection is opened;
  the WebSocket streams PCM in and partials, segments and a final out (``serve_app.services.live.stream.PROTOCOL``).
- The Live API: ``POST /v1/realtime/client_secrets`` mints a short-lived secret with an API token; the
  ``/v1/realtime`` WebSocket, opened with that secret in its subprotocols, streams audio in and transcript deltas
  out (``serve_app.services.live.realtime.PROTOCOL``).

docs/speech.md describes both."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response, WebSocket

from contracts.errors import DomainError
from contracts.realtime import ClientSecret, ClientSecretRequest
from serve_app.admission.kinds import not_capacity_checked
from serve_app.auth import AnyCaller, Caller, Ctx, admit_live_principal, admit_live_session, authenticate
from serve_app.errors import refuse_websocket
from serve_app.services.live import realtime as live_api
from serve_app.services.live import stream as live_stream

router = APIRouter(tags=["live"])


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
        await live_stream.stream(ctx, caller, websocket, seat)
    finally:
        await ctx.admission.live.release(seat)


@router.post("/v1/realtime/client_secrets", response_model=ClientSecret)
@not_capacity_checked("mints a client secret: asks the speech deployment only whether it serves the language")
async def client_secrets(
    caller: AnyCaller, ctx: Ctx, body: Annotated[ClientSecretRequest | None, Body()] = None
) -> ClientSecret:
    """A client secret for one Live API session: single use, short-lived
    (`KHULUMA_SPEECH_REALTIME_SECRET_SECONDS`), bound to this token's customer and project and to the
    session configuration. Hand it to the browser or app instead of the token."""
    return await live_api.mint(ctx, caller, body)


@router.websocket("/v1/realtime")
async def realtime(websocket: WebSocket, ctx: Ctx) -> None:
    """Live transcription (and translation). The client secret comes in the subprotocols and is checked, and used
    up, before the connection is accepted."""
    token = websocket.headers.get("x-client-token")
    try:
        asserted = await authenticate(ctx, token) if token else None
        live = await live_api.authorise(ctx, list(websocket.scope.get("subprotocols") or []), asserted)
        # the secret's minter is admitted as on /ws/stream-transcribe: requests per minute, audio of the day, seats
        seat = await admit_live_principal(ctx, websocket, live.principal)
    except DomainError as exc:
        await refuse_websocket(websocket, exc)
        return
    try:
        await live_api.session(ctx, live, websocket)
    finally:
        await ctx.admission.live.release(seat)

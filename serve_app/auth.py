"""``X-CLIENT-TOKEN`` authentication and admission as FastAPI dependencies.

Every authenticated route depends on :func:`require_principal`: the token, then the customer's requests per minute
(``serve_app/admission.py``). The request's :class:`~serve_app.admission.Admitted` goes into the ASGI scope's state,
where the edge finds it to add ``RateLimit`` headers to the answer and to count a refusal for the customer. The live
stream route admits with :func:`admit_live_session` before it accepts the WebSocket.
"""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import Depends, Security
from fastapi.security import APIKeyHeader
from starlette.requests import HTTPConnection

from contracts.errors import Overloaded, Unauthenticated
from serve_app.admission import STATE_KEY, Admitted, LiveSeat
from serve_app.context import AppContext, get_context
from serve_app.lifecycle import REFUSAL, RETRY_AFTER_S
from serve_app.tokens import Principal

_token_header = APIKeyHeader(name="X-CLIENT-TOKEN", auto_error=False, description="API token for the project.")


async def authenticate(ctx: AppContext, token: str | None) -> Principal:
    if not token:
        raise Unauthenticated("Missing X-CLIENT-TOKEN header.")
    principal = ctx.tokens.cached(token)
    if principal is None:
        principal = await anyio.to_thread.run_sync(ctx.tokens.verify, token)
    if principal is None:
        raise Unauthenticated("Invalid or revoked client token.")
    return principal


async def admit(ctx: AppContext, connection: HTTPConnection, principal: Principal) -> Admitted:
    """Count the request against the customer's requests per minute (429 past it); noted in the scope's state."""
    admitted = Admitted(principal.customer_id, ctx.usage)
    connection.scope.setdefault("state", {})[STATE_KEY] = admitted  # before the check: a refusal is counted too
    admitted.rate = await ctx.admission.admit_request(principal)
    return admitted


async def require_principal(
    token: Annotated[str | None, Security(_token_header)],
    ctx: Annotated[AppContext, Depends(get_context)],
    connection: HTTPConnection,
) -> Principal:
    principal = await authenticate(ctx, token)
    await admit(ctx, connection, principal)
    return principal


async def admit_live_session(
    ctx: AppContext, connection: HTTPConnection, token: str | None
) -> tuple[Principal, LiveSeat]:
    """Everything a live session must pass before its WebSocket is accepted: the token, the requests per minute
    (opening a session is a request), no graceful stop under way, the customer's audio of the day and a seat among
    its live sessions and this replica's. Raises the domain error to refuse with."""
    principal = await authenticate(ctx, token)
    await admit(ctx, connection, principal)
    if ctx.drain.draining:
        raise Overloaded(REFUSAL, RETRY_AFTER_S)
    await ctx.admission.check_audio(principal)
    limits = await ctx.admission.limits_for(principal.customer_id)
    return principal, await ctx.admission.live.take(principal, limits.live_sessions)


Caller = Annotated[Principal, Depends(require_principal)]
Ctx = Annotated[AppContext, Depends(get_context)]

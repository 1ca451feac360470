"""Authentication as FastAPI dependencies: one place reads the credential a client presented
(:func:`presented_token`), one verifies it (:func:`authenticate`).

- The native routes (the spec's): the ``X-CLIENT-TOKEN`` header (:data:`Caller`).
- The OpenAI-compatible routes (``/v1/audio/...``, ``/v1/embeddings``, ``/v1/models``): ``Authorization: Bearer
  <token>`` as OpenAI's SDKs send it, and ``X-CLIENT-TOKEN``, HTTP Basic or ``x-api-key`` (:data:`OpenAICaller`).
- The self-hosted profile routes (``/v1/translate``, ``/v1/transcribe``): HTTP Basic with a Khuluma token as the
  password (the user name is free), and the same others (:data:`ProfileCaller`).
- The Live API's ``POST /v1/realtime/client_secrets``: ``X-CLIENT-TOKEN``, ``x-api-key`` (as Vulavula's clients
  send it), HTTP Basic or Bearer (:data:`AnyCaller`).

Every credential is the same Khuluma token (``khuluma token create``); only the wording of a refusal differs, so
each family's clients read a message in their own terms.

Every authenticated route also passes admission: the customer's requests per minute
(``serve_app/admission/customers.py``).
The request's :class:`~serve_app.admission.Admitted` goes into the ASGI scope's state, where the edge finds it to add
``RateLimit`` headers to the answer and to count a refusal for the customer. The live routes admit with
:func:`admit_live_session` before they accept the WebSocket.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated

import anyio
from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader
from starlette.requests import HTTPConnection

from contracts.errors import Overloaded, Unauthenticated
from serve_app.admission.customers import STATE_KEY, Admitted
from serve_app.admission.live import LiveSeat
from serve_app.context import AppContext, get_context
from serve_app.lifecycle import REFUSAL, RETRY_AFTER_S
from serve_app.tokens import Principal

_token_header = APIKeyHeader(name="X-CLIENT-TOKEN", auto_error=False, description="API token for the project.")


@dataclass(frozen=True)
class Wording:
    """What a refusal says: no credential at all, or one that is not a live token."""

    missing: str
    invalid: str


NATIVE = Wording("Missing X-CLIENT-TOKEN header.", "Invalid or revoked client token.")
OPENAI = Wording(
    "You didn't provide an API key. You need to provide your Khuluma token in an Authorization header using Bearer "
    "auth (i.e. Authorization: Bearer YOUR_TOKEN); `khuluma token create` makes one.",
    "Incorrect API key provided: it is not a live Khuluma token (`khuluma token create` makes one).",
)
PROFILE = Wording(
    "Missing credentials: send HTTP Basic auth with a Khuluma token as the password, or the X-CLIENT-TOKEN header.",
    "Invalid credentials: the HTTP Basic password (or X-CLIENT-TOKEN) is not a live Khuluma token.",
)


def presented_token(headers: Mapping[str, str]) -> str | None:
    """The token in ``X-CLIENT-TOKEN``, ``Authorization: Bearer <token>``, ``Authorization: Basic`` (the password;
    the user name is ignored) or ``x-api-key``, in that order; None when none is there. Basic credentials that do
    not decode are refused (401) rather than ignored."""
    token = headers.get("x-client-token")
    if token:
        return token
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return value
    if scheme.lower() == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthenticated("Malformed HTTP Basic credentials (base64 of 'user:token' expected).") from None
        return decoded.partition(":")[2] or None
    return headers.get("x-api-key") or None


async def authenticate(ctx: AppContext, token: str | None, wording: Wording = NATIVE) -> Principal:
    """The principal of a live token, else :class:`Unauthenticated` (401) in the caller's wording."""
    if not token:
        raise Unauthenticated(wording.missing)
    principal = ctx.tokens.cached(token)
    if principal is None:
        principal = await anyio.to_thread.run_sync(ctx.tokens.verify, token)
    if principal is None:
        raise Unauthenticated(wording.invalid)
    return principal


async def admit(ctx: AppContext, connection: HTTPConnection, principal: Principal) -> Admitted:
    """Count the request against the customer's requests per minute (429 past it); noted in the scope's state."""
    admitted = Admitted(principal.customer_id, ctx.usage)
    connection.scope.setdefault("state", {})[STATE_KEY] = admitted  # before the check: a refusal is counted too
    admitted.rate = await ctx.admission.customers.admit_request(principal)
    return admitted


async def require_principal(
    token: Annotated[str | None, Security(_token_header)],
    ctx: Annotated[AppContext, Depends(get_context)],
    connection: HTTPConnection,
) -> Principal:
    principal = await authenticate(ctx, token)
    await admit(ctx, connection, principal)
    return principal


def _any_credential(wording: Wording) -> Callable[[Request, AppContext], Awaitable[Principal]]:
    async def require(request: Request, ctx: Annotated[AppContext, Depends(get_context)]) -> Principal:
        principal = await authenticate(ctx, presented_token(request.headers), wording)
        await admit(ctx, request, principal)
        return principal

    return require


async def admit_live_session(
    ctx: AppContext, connection: HTTPConnection, token: str | None
) -> tuple[Principal, LiveSeat]:
    """Everything a live session must pass before its WebSocket is accepted: the token, the requests per minute
    (opening a session is a request), no graceful stop under way, the customer's audio of the day and a seat among
    its live sessions and this replica's. Raises the domain error to refuse with."""
    principal = await authenticate(ctx, token)
    return principal, await admit_live_principal(ctx, connection, principal)


async def admit_live_principal(ctx: AppContext, connection: HTTPConnection, principal: Principal) -> LiveSeat:
    """:func:`admit_live_session` for a caller already authenticated (the Live API's secret names its minter). The
    seat is taken only while speech keeps every open session at real time (``serve_app/admission/live.py``)."""
    await admit(ctx, connection, principal)
    if ctx.drain.draining:
        raise Overloaded(REFUSAL, RETRY_AFTER_S)
    await ctx.admission.customers.check_audio(principal)
    limits = await ctx.admission.customers.limits_for(principal.customer_id)
    return await ctx.admission.live.take(principal, limits.live_sessions)


Caller = Annotated[Principal, Depends(require_principal)]
AnyCaller = Annotated[Principal, Depends(_any_credential(NATIVE))]  # the Live API's client_secrets
OpenAICaller = Annotated[Principal, Depends(_any_credential(OPENAI))]
ProfileCaller = Annotated[Principal, Depends(_any_credential(PROFILE))]
Ctx = Annotated[AppContext, Depends(get_context)]

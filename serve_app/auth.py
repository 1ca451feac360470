"""``X-CLIENT-TOKEN`` authentication as a FastAPI dependency."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import Depends, Security
from fastapi.security import APIKeyHeader

from contracts.errors import Unauthenticated
from serve_app.context import AppContext, get_context
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


async def require_principal(
    token: Annotated[str | None, Security(_token_header)],
    ctx: Annotated[AppContext, Depends(get_context)],
) -> Principal:
    return await authenticate(ctx, token)


Caller = Annotated[Principal, Depends(require_principal)]
Ctx = Annotated[AppContext, Depends(get_context)]

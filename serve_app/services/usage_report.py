"""Usage report over the caller's usage records. Filled in by the batch/usage capability."""

from __future__ import annotations

from typing import Any

from serve_app.context import AppContext
from serve_app.errors import ServiceUnavailable
from serve_app.tokens import Principal


async def report(ctx: AppContext, caller: Principal, start: str, end: str, interval: str) -> dict[str, Any]:
    raise ServiceUnavailable("The usage report is not yet available in this build.")

"""Metering: every metered route records one usage row (invocation, outcome, seconds, tokens)."""

from __future__ import annotations

import anyio

from cluster.metrics import record_audio
from persistence.models import UsageRecord
from serve_app.context import AppContext
from serve_app.tokens import Principal


def _insert(ctx: AppContext, row: UsageRecord) -> None:
    with ctx.db.session() as s:
        s.add(row)


async def record_usage(
    ctx: AppContext,
    principal: Principal,
    route: str,
    *,
    status: str = "successful",
    seconds: float = 0.0,
    tokens: int = 0,
    reference_id: str | None = None,
) -> None:
    row = UsageRecord(
        customer_id=principal.customer_id,
        project_id=principal.project_id,
        route=route,
        status=status,
        seconds_transcribed=float(seconds),
        tokens=int(tokens),
        reference_id=reference_id,
    )
    await anyio.to_thread.run_sync(_insert, ctx, row)
    if status == "successful":
        record_audio(route, seconds)


def count_tokens(text: str) -> int:
    """Whitespace tokens: the unit of the spec's 2,000-token limit and of usage metering."""
    return len(text.split())

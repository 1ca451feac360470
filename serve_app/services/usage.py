"""Metering: every metered route records one usage row (invocation, outcome, seconds, tokens). A request refused
before any work (a customer limit: 429; a full queue: 503 ``Overloaded``) records none: it is counted as a refusal
at the edge (``serve_app/errors.py``) and never billed.

The row goes to the context's :class:`persistence.usage_meter.UsageMeter`, which writes rows in batches off the
request path (``KHULUMA_USAGE_FLUSH_SECONDS``); the usage report flushes it first."""

from __future__ import annotations

from persistence.models import utcnow
from persistence.usage_meter import UsageRow
from runtime.metrics import record_audio
from serve_app.context import AppContext
from serve_app.tokens import Principal


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
    row: UsageRow = {
        "customer_id": principal.customer_id,
        "project_id": principal.project_id,
        "route": route,
        "status": status,
        "seconds_transcribed": float(seconds),
        "tokens": int(tokens),
        "reference_id": reference_id,
        "created_at": utcnow(),  # when it was answered, not when the meter writes it
    }
    await ctx.usage.add(row)
    ctx.admission.customers.note_audio(principal.customer_id, seconds)  # counts toward the customer's audio of the day
    if status == "successful":
        record_audio(route, seconds)


def count_tokens(text: str) -> int:
    """Whitespace tokens: the unit of the spec's 2,000-token limit and of usage metering."""
    return len(text.split())

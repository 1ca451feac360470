"""Batch transcription services. Filled in by the batch capability."""

from __future__ import annotations

from typing import Any

from serve_app.context import AppContext
from serve_app.errors import ServiceUnavailable
from serve_app.tokens import Principal

_PENDING = "Batch transcription is not yet available in this build."


async def create(ctx: AppContext, caller: Principal, lang_code: str | None) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def process(ctx: AppContext, caller: Principal, batch_id: str, diarise: bool) -> int:
    """Returns 202 when processing starts, 204 when it already ran or runs."""
    raise ServiceUnavailable(_PENDING)


async def list_batches(ctx: AppContext, caller: Principal) -> list[dict[str, Any]]:
    raise ServiceUnavailable(_PENDING)


async def transcriptions(ctx: AppContext, caller: Principal, batch_id: str) -> list[dict[str, Any]]:
    raise ServiceUnavailable(_PENDING)

"""Knowledge-base services. Filled in by the knowledge-base capability."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from serve_app.context import AppContext
from serve_app.errors import ServiceUnavailable
from serve_app.tokens import Principal

_PENDING = "Knowledge-base search is not yet available in this build."


async def create_kb(ctx: AppContext, caller: Principal, name: str) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def list_kbs(ctx: AppContext, caller: Principal) -> list[dict[str, Any]]:
    raise ServiceUnavailable(_PENDING)


async def delete_kb(ctx: AppContext, caller: Principal, kb_id: str) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def add_document(ctx: AppContext, caller: Principal, kb_id: str, request: Request) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def list_documents(ctx: AppContext, caller: Principal, kb_id: str) -> list[dict[str, Any]]:
    raise ServiceUnavailable(_PENDING)


async def delete_document(ctx: AppContext, caller: Principal, document_id: str) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def query(ctx: AppContext, caller: Principal, kb_id: str, text: str, language: str | None,
                top_k: int) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)

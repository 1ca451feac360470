"""Transcription services (sync, fast, v1, async jobs, streaming). Filled in by the speech capability."""

from __future__ import annotations

from typing import Any

from fastapi import Request, WebSocket

from serve_app.context import AppContext
from serve_app.errors import ServiceUnavailable
from serve_app.tokens import Principal

_PENDING = "Speech transcription is not yet available in this build."


async def sync_file(ctx: AppContext, caller: Principal, request: Request, lang_code: str | None, diarise: bool,
                    detect_music: bool, translate: bool = False) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def fast(ctx: AppContext, caller: Principal, request: Request, lang_code: str | None) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def v1_sync(ctx: AppContext, caller: Principal, file_name: str, audio_blob: str) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def v1_upload(ctx: AppContext, caller: Principal, file_name: str, audio_blob: str) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def v1_process(ctx: AppContext, caller: Principal, upload_id: str, webhook: str | None,
                     language_code: str | None) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def v1_get(ctx: AppContext, caller: Principal, upload_id: str) -> dict[str, Any]:
    raise ServiceUnavailable(_PENDING)


async def stream(ctx: AppContext, caller: Principal, websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_json({"type": "error", "detail": _PENDING})
    await websocket.close(code=1011)

"""Utility routes: version metadata, favicon, health probes and the models listing."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, JSONResponse

from contracts.meta import Health, Metadata, ModelsListing
from serve_app.auth import Ctx
from serve_app.services import meta

router = APIRouter(tags=["utility"])
_FAVICON = Path(__file__).resolve().parent.parent / "static" / "favicon.ico"


@router.get("/_meta/version", response_model=Metadata)
async def version(ctx: Ctx) -> Metadata:
    return meta.metadata(ctx)


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> FileResponse:
    return FileResponse(_FAVICON, media_type="image/x-icon")


@router.get("/api/v1/health", response_model=Health)
@router.get("/health", response_model=Health)
async def health(ctx: Ctx) -> JSONResponse:
    """Deployment probe: 200 when every deployment answers, 503 (same body) when any does not, and 503 with status
    ``draining`` during a graceful stop (load balancers stop sending)."""
    body = await meta.health(ctx)
    # a healthy entry carries no "detail" key at all
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if body.status == "ok" else 503)


@router.get("/api/v1/models", response_model=ModelsListing)
async def models(ctx: Ctx) -> ModelsListing:
    """Per capability: the model really loaded and the languages it really covers."""
    return await meta.models(ctx)

"""The edge of the service: domain errors become HTTP answers here (statuses from the one table,
``contracts.errors.HTTP_STATUS``), and every answer has one shape, ``{"detail": "..."}``, never a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cluster.request_context import serve_request_id
from contracts.errors import DomainError, find_domain_error, http_status

log = logging.getLogger("khuluma")


def error_response(error: DomainError) -> JSONResponse:
    return JSONResponse({"detail": error.detail}, status_code=http_status(error))


async def refuse_websocket(websocket: WebSocket, error: DomainError) -> None:
    """Refuse a WebSocket upgrade before it is accepted: the error's HTTP answer (status and ``{"detail"}``) where
    the server can send one, else a close with 1008 (the client then sees a 403)."""
    try:
        await websocket.send_denial_response(error_response(error))
    except RuntimeError:  # server without the denial-response extension
        await websocket.close(code=1008, reason=error.detail[:120])


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]  # the location, not part of the field name
    return ".".join(parts) or "body"


def validation_message(exc: RequestValidationError) -> str:
    messages = []
    for err in exc.errors():
        field = _field_path(err.get("loc", ()))
        kind = err.get("type", "")
        if kind == "missing":
            messages.append(f"field '{field}' is required")
        elif kind == "json_invalid":
            messages.append("request body is not valid JSON")
        else:
            messages.append(f"field '{field}': {err.get('msg', 'invalid value')}")
    return "Invalid request: " + "; ".join(messages)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_message(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        domain = find_domain_error(exc)
        if domain is not None:
            return error_response(domain)
        request_id = getattr(request.state, "request_id", "-")
        log.error(
            "unhandled error in %s %s [request_id=%s]", request.method, request.url.path, request_id, exc_info=exc
        )
        # Serve adds the X-Request-ID header itself (same id); without Serve this 500 bypasses the middleware.
        return JSONResponse(
            {"detail": f"Internal server error (request id {request_id})."},
            status_code=500,
            headers=None if serve_request_id() else {"X-Request-ID": request_id},
        )

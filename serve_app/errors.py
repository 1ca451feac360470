"""One error shape everywhere: ``{"detail": "..."}`` with the right status, never a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("khuluma")


class ApiError(Exception):
    """An error with an HTTP status that engines and services may raise; the ingress renders it."""

    status_code = 500

    def __init__(self, detail: str, status_code: int | None = None, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.detail = detail
        if status_code is not None:
            self.status_code = status_code
        self.headers = headers

    def __reduce__(self):  # survive pickling across Ray actors
        return (type(self), (self.detail, self.status_code, self.headers))


class BadRequest(ApiError):
    status_code = 400


class Unauthorized(ApiError):
    status_code = 401


class NotFound(ApiError):
    status_code = 404


class PayloadTooLarge(ApiError):
    status_code = 413


class UnsupportedMediaType(ApiError):
    status_code = 415


class ServiceUnavailable(ApiError):
    status_code = 503


class GatewayTimeout(ApiError):
    status_code = 504


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


def find_api_error(exc: BaseException) -> ApiError | None:
    """Ray wraps exceptions raised in replicas; dig the ApiError out of the chain."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, ApiError):
            return current
        cause = getattr(current, "cause", None)  # ray.exceptions.RayTaskError keeps the original here
        if isinstance(cause, ApiError):
            return cause
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_message(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        api_error = find_api_error(exc)
        if api_error is not None:
            return await _api_error(request, api_error)
        request_id = getattr(request.state, "request_id", "-")
        log.error("unhandled error in %s %s [request_id=%s]", request.method, request.url.path, request_id,
                  exc_info=exc)
        return JSONResponse(
            {"detail": f"Internal server error (request id {request_id})."},
            status_code=500,
            headers={"X-Request-ID": request_id},
        )

"""The edge of the service: domain errors become HTTP answers here (statuses from the one table,
``contracts.errors.HTTP_STATUS``), and every answer has one shape, ``{"detail": "..."}``, never a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cluster.request_context import serve_request_id
from contracts.errors import DomainError, Overloaded, RateLimited, find_domain_error, http_status
from serve_app.admission import STATE_KEY, Admitted, rate_headers

log = logging.getLogger("khuluma")


def error_response(error: DomainError) -> JSONResponse:
    """The answer to a domain error: its status from the one table, ``{"detail": ...}``, and for a refusal
    ``Retry-After`` (whole seconds) and, at a limit with a window, the ``RateLimit-Policy``/``RateLimit`` headers."""
    response = JSONResponse({"detail": error.detail}, status_code=http_status(error))
    if isinstance(error, RateLimited | Overloaded):
        response.headers["Retry-After"] = str(error.retry_after)
    if isinstance(error, RateLimited) and error.limit and error.window_s:
        for name, value in rate_headers(error.limit, 0, error.retry_after, error.window_s):
            response.headers[name.decode()] = value.decode()
    return response


def refusal_reason(error: DomainError) -> str | None:
    """The reason a refused request is counted under in the usage report; None when ``error`` is no refusal."""
    if isinstance(error, RateLimited):
        return error.reason or "rate_limited"
    if isinstance(error, Overloaded):
        return "overloaded"
    return None


def count_refusal(state: dict[str, Any] | None, error: DomainError) -> None:
    """A refusal of an authenticated request is counted for its customer (never billed as an invocation)."""
    admitted = (state or {}).get(STATE_KEY)
    reason = refusal_reason(error)
    if isinstance(admitted, Admitted) and reason:
        admitted.refused(reason)


def _answer(request: Request, error: DomainError) -> JSONResponse:
    count_refusal(request.scope.get("state"), error)
    return error_response(error)


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
    async def _domain(request: Request, exc: DomainError) -> JSONResponse:
        return _answer(request, exc)

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
            return _answer(request, domain)
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

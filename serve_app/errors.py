"""The edge of the service: domain errors become HTTP answers here (statuses from the one table,
``contracts.errors.HTTP_STATUS``), never with a stack trace, in one of two shapes chosen by the route's path:

- ``{"detail": "..."}`` everywhere (the spec's routes, the self-hosted profile's);
- OpenAI's ``{"error": {"message", "type", "param", "code"}}`` on the OpenAI-compatible routes
  (:data:`OPENAI_PREFIXES`), with the same statuses, so OpenAI's SDKs raise their usual exceptions.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.errors import (
    DomainError,
    LanguageNotServed,
    ModelMissing,
    Overloaded,
    RateLimited,
    Unauthenticated,
    UnknownModel,
    UnsupportedLanguage,
    find_domain_error,
    http_status,
)
from runtime.request_context import serve_request_id
from serve_app.admission.customers import STATE_KEY, Admitted, rate_headers

log = logging.getLogger(__name__)

# Paths whose errors take OpenAI's shape (serve_app/routers/openai.py).
OPENAI_PREFIXES = ("/v1/audio/", "/v1/embeddings", "/v1/models", "/v1/chat/")


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PREFIXES)


def _openai_type(status: int) -> str:
    if status == 429:
        return "requests"  # as OpenAI words a request-rate limit
    return "server_error" if status >= 500 else "invalid_request_error"


def _openai_code(error: DomainError | None, status: int) -> str | None:
    """OpenAI's ``code`` where one fits (their SDKs and tools branch on a few)."""
    codes: tuple[tuple[type[DomainError], str], ...] = (
        (Unauthenticated, "invalid_api_key"),
        (UnknownModel, "model_not_found"),
        (LanguageNotServed, "unsupported_language"),
        (UnsupportedLanguage, "unsupported_language"),
        (ModelMissing, "model_not_installed"),
    )
    for cls, code in codes:
        if isinstance(error, cls):
            return code
    return {413: "request_too_large", 415: "unsupported_media_type", 429: "rate_limit_exceeded"}.get(status)


_FIELD = re.compile(r"field '([^']+)'")


def _openai_param(error: DomainError | None) -> str | None:
    """The request field an error is about, where it says."""
    if isinstance(error, UnknownModel):
        return "model"
    if isinstance(error, UnsupportedLanguage | LanguageNotServed):
        return "language"
    named = _FIELD.search(error.detail) if error is not None else None
    return named.group(1) if named else None


def error_body(
    path: str, status: int, message: str, error: DomainError | None = None, param: str | None = None
) -> dict[str, Any]:
    """The body of an error answer on ``path``."""
    if not is_openai_path(path):
        return {"detail": message}
    return {
        "error": {
            "message": message,
            "type": _openai_type(status),
            "param": param or _openai_param(error),
            "code": _openai_code(error, status),
        }
    }


def error_response(error: DomainError, path: str = "") -> JSONResponse:
    """The answer to a domain error on ``path``: its status from the one table, the path's error shape, and for a
    refusal ``Retry-After`` (whole seconds) and, at a limit with a window, the ``RateLimit-Policy``/``RateLimit``
    headers."""
    status = http_status(error)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 and is_openai_path(path) else None
    response = JSONResponse(error_body(path, status, error.detail, error), status_code=status, headers=headers)
    for name, value in refusal_headers(error):
        response.headers[name.decode()] = value.decode()
    return response


def refusal_headers(error: DomainError) -> list[tuple[bytes, bytes]]:
    """A refusal's headers: ``Retry-After`` (whole seconds) and, at a limit with a window, ``RateLimit-Policy`` and
    ``RateLimit``; none for any other error."""
    if not isinstance(error, RateLimited | Overloaded):
        return []
    headers = [(b"retry-after", str(error.retry_after).encode())]
    if isinstance(error, RateLimited) and error.limit and error.window_s:
        headers += rate_headers(error.limit, 0, error.retry_after, error.window_s)
    return headers


async def refuse_websocket(websocket: WebSocket, error: DomainError) -> None:
    """Refuse a WebSocket upgrade before it is accepted: the error's HTTP answer (status, ``{"detail"}`` and a
    refusal's headers) where the server can send one, else a close with 4429 at a limit or 1008 (the client then
    sees a 403), 1013 (try again later) at capacity; the reason says when to retry. A refusal at a limit is counted
    for the customer."""
    count_refusal(websocket.scope.get("state"), error)
    denial = error_response(error)
    try:
        await websocket.send_denial_response(denial)
    except RuntimeError:  # server without the denial-response extension
        code = {429: 4429, 503: 1013}.get(denial.status_code, 1008)
        await websocket.close(code=code, reason=error.detail[:120])


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
    return error_response(error, request.url.path)


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
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        named = errors and errors[0].get("type") != "json_invalid"
        param = _field_path(errors[0].get("loc", ())) if named else None
        return JSONResponse(error_body(request.url.path, 400, validation_message(exc), param=param), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse(
            error_body(request.url.path, exc.status_code, detail),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

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
            error_body(request.url.path, 500, f"Internal server error (request id {request_id})."),
            status_code=500,
            headers=None if serve_request_id() else {"X-Request-ID": request_id},
        )

"""Pure-ASGI middleware (cheaper than BaseHTTPMiddleware): slash collapsing and request ids."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cluster.request_context import serve_request_id

_SLASHES = re.compile(r"/{2,}")
# The id of the request being handled, for log lines (contracts.logs) written anywhere below the middleware.
CURRENT_REQUEST_ID: ContextVar[str | None] = ContextVar("khuluma_request_id", default=None)


def current_request_id() -> str | None:
    return CURRENT_REQUEST_ID.get() or serve_request_id()


class WireCompatMiddleware:
    """Collapse repeated slashes (clients build ``f"{base_url}/path"``) and tag each request with an id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if "//" in path:
            scope = dict(scope)
            scope["path"] = _SLASHES.sub("/", path)
            raw = scope.get("raw_path")
            if raw:
                scope["raw_path"] = _SLASHES.sub("/", raw.decode("latin-1")).encode("latin-1")
        request_id = None
        for key, value in scope.get("headers", ()):
            if key == b"x-request-id":
                request_id = value.decode("latin-1")[:64]
                break
        # the client's id, else the one Serve already gave this request (it follows the request into the model
        # deployments, so their log lines carry it too), else a new one (plain uvicorn)
        # Under Serve that is also the id Serve answers in its own X-Request-ID header, so only add ours without it.
        served = serve_request_id()
        request_id = request_id or served or uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = request_id
        token = CURRENT_REQUEST_ID.set(request_id)
        try:
            await self._call(scope, receive, send, request_id, add_header=served is None)
        finally:
            CURRENT_REQUEST_ID.reset(token)

    async def _call(self, scope: Scope, receive: Receive, send: Send, request_id: str, add_header: bool) -> None:
        if scope["type"] != "http" or not add_header:
            await self.app(scope, receive, send)
            return

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)

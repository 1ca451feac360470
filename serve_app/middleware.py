"""Pure-ASGI middleware (cheaper than BaseHTTPMiddleware): slash collapsing and request ids."""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_SLASHES = re.compile(r"/{2,}")


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
        request_id = request_id or uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = request_id
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)

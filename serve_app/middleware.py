"""Pure-ASGI middleware (cheaper than BaseHTTPMiddleware): slash collapsing, request ids, body size limits."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextvars import ContextVar

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contracts.errors import Overloaded, RateLimited, Unauthenticated, http_status
from runtime.memory import release_freed_memory
from runtime.metrics import record_refusals, record_request, set_admission
from runtime.request_context import serve_request_id
from serve_app.admission.capacity import Capacity
from serve_app.admission.cost import audio_in_body, header_cost
from serve_app.admission.customers import STATE_KEY, Admitted
from serve_app.admission.kinds import RouteKinds
from serve_app.auth import presented_token
from serve_app.context import AppContext
from serve_app.errors import error_body, refusal_headers, refusal_reason
from serve_app.lifecycle import REFUSAL, RETRY_AFTER_S, Drain

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


MULTIPART_OVERHEAD = 64 * 1024  # part headers and boundaries around the largest accepted file
LARGE_BODY_BYTES = 8 * 1024 * 1024  # after a body this large is answered, freed heap memory is returned


class BodyLimitMiddleware:
    """Refuse a request body over its limit before the app parses it: by Content-Length at once (413, nothing
    read), and for a chunked body by counting as it streams in: at the first byte over, this middleware answers
    413 itself and tells the app the client left (what the app does next is not sent). Multipart uploads get
    ``max_upload_bytes``; the v1 base64 audio routes (``base64_paths``) the base64 of that; every other body
    ``max_json_bytes``. Memory stays bounded whatever a client claims or sends, and what a large body cost is
    handed back to the OS once it is answered."""

    def __init__(
        self, app: ASGIApp, max_json_bytes: int, max_upload_bytes: int, base64_paths: frozenset[str] = frozenset()
    ) -> None:
        self.app = app
        self.max_json_bytes = max_json_bytes
        self.max_upload_bytes = max_upload_bytes + MULTIPART_OVERHEAD
        self.max_base64_bytes = max_upload_bytes * 4 // 3 + MULTIPART_OVERHEAD
        self.base64_paths = base64_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        if headers.get(b"content-type", b"").lower().startswith(b"multipart/"):
            limit, setting = self.max_upload_bytes, "KHULUMA_MAX_REQUEST_MB"
        elif scope.get("path", "").rstrip("/") in self.base64_paths:
            limit, setting = self.max_base64_bytes, "KHULUMA_MAX_REQUEST_MB, as base64"
        else:
            limit, setting = self.max_json_bytes, "KHULUMA_MAX_JSON_MB"
        message = f"Request body exceeds the limit of {limit / (1024 * 1024):.0f} MB ({setting})."
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            await _refuse(send, scope, message)
            return
        received, refused = 0, False

        async def counted() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > limit:
                    refused = True
                    await _refuse(send, scope, message)
                    return {"type": "http.disconnect"}
            return event

        async def guarded(event: Message) -> None:
            if not refused:  # once refused, the answer was sent: the app's own reply to "disconnect" is dropped
                await send(event)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not refused:
                raise  # a real failure; after a refusal it is only the app noticing the "disconnect"
        finally:
            if refused or received > LARGE_BODY_BYTES:
                release_freed_memory()  # what the app buffered goes back to the OS, not to the heap


async def _refuse(send: Send, scope: Scope, detail: str) -> None:
    body = json.dumps(error_body(scope.get("path", ""), 413, detail)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class MetricsMiddleware:
    """Count and time every HTTP answer by route template (``/api/v1/search/knowledgebase/{knowledgebase_id}``,
    never the raw path: bounded label values), method and status (``runtime/metrics.py``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def observed(event: Message) -> None:
            nonlocal status
            if event["type"] == "http.response.start":
                status = int(event["status"])
            await send(event)

        try:
            await self.app(scope, receive, observed)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            record_request(route, scope.get("method", ""), status, time.perf_counter() - start)


HEALTH_PATHS = frozenset({"/health", "/api/v1/health"})  # answered while draining: they say "draining"


class AdmissionMiddleware:
    """Admission at the edge, the outermost of the app's middleware: for every HTTP request and live session, before
    routing, authentication or the body:

    - while the replica drains (a graceful stop, ``serve_app/lifecycle.py``) a new HTTP request answers 503 at once
      (``Retry-After``, ``Connection: close``), except the health routes;
    - a model-bound request (its kind of work as its route declared it: ``kinds``, the app's
      :class:`~serve_app.admission.kinds.RouteKinds`) is sized from its headers and passes this server's capacity
      for its kind of work (``serve_app/admission/capacity.py``), or answers 503 (429 past its customer's
      concurrent share) with ``Retry-After`` at once; the customer is the one of a token the replica has verified
      (a token not seen yet is sized as one anonymous customer), and a refusal is counted for it;
    - a transcription's size is then the audio seconds its file's header states, from the first bytes of the body,
      handed on to the route unchanged;
    - requests and sessions in flight are counted, so the drain knows when they are done;
    - the answer of a request admitted under a requests-per-minute limit carries its ``RateLimit-Policy`` and
      ``RateLimit`` headers (a 429 already has its own, rendered with the error: ``serve_app/errors.py``).

    A customer that comes back before the ``Retry-After`` of its last refusal gets its next refusal only when that
    time has come (:class:`Patience`): a flood that ignores ``Retry-After`` then sends one request per connection
    per ``Retry-After``, not one per refusal's round trip.

    A refusal here is answered before routing, so it is counted in ``khuluma_admission_refusals_total``, not per
    route: reported with each kind's limit and cost in flight at most once a second, as requests pass
    (``runtime/metrics.py``).
    """

    def __init__(self, app: ASGIApp, drain: Drain, capacity: Capacity, kinds: RouteKinds) -> None:
        self.app = app
        self.drain = drain
        self.capacity = capacity
        self.kinds = kinds
        self.refused: Counter[tuple[str, int]] = Counter()
        self.reported_at = 0.0
        self.patience = Patience()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})  # one dict for the middleware's copies of the scope: the admission is in it
        path = scope.get("path", "")
        if "//" in path:
            path = _SLASHES.sub("/", path)  # as the wire-compat middleware, inside, collapses it
        if kind == "http" and self.drain.draining and path not in HEALTH_PATHS:
            self._count("draining", 503)
            await _refuse_while_draining(send)
            return
        work = self.kinds.kind_of(scope.get("method", ""), path) if kind == "http" else None
        if work is None:
            self.drain.in_flight += 1
            try:
                await self.app(scope, receive, _with_rate_headers(scope, send) if kind == "http" else send)
            finally:
                self.drain.in_flight -= 1
                self._report()
            return
        limiter = self.capacity[work.name]
        headers = dict(scope.get("headers", ()))
        customer, share, context = _customer(scope, headers)
        try:
            ticket = limiter.enter(customer, header_cost(work, headers, limiter.mean_cost), share)
        except (Overloaded, RateLimited) as refused:  # nothing read: a refusal costs next to nothing
            if context is not None and customer is not None:
                context.usage.refused(customer, refusal_reason(refused) or "overloaded")
            self._count(work.name, http_status(refused))
            await self.patience.hold(customer, refused.retry_after)
            await _refuse_at_once(send, path, refused)
            return
        self.drain.in_flight += 1
        status = 500
        try:
            if work.audio:
                seconds, receive = await audio_in_body(receive, headers)
                if seconds is not None:
                    limiter.resize(ticket, work.overhead + seconds)
            answer = _with_rate_headers(scope, send)

            async def answered(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    limiter.answered(ticket)
                await answer(message)

            await self.app(scope, receive, answered)
        finally:
            self.drain.in_flight -= 1
            limiter.leave(ticket, measured=200 <= status < 300)
            self._report()

    def _count(self, kind: str, status: int) -> None:
        self.refused[(kind, status)] += 1
        self._report()

    def _report(self) -> None:
        """The refusals counted since the last report, and each kind's limit, to the metrics: once a second."""
        now = time.monotonic()
        if now - self.reported_at < 1.0:
            return
        self.reported_at = now
        for (kind, status), count in self.refused.items():
            record_refusals(kind, status, count)
        self.refused.clear()
        for kind, limiter in self.capacity.limiters.items():
            set_admission(kind, limiter.limit or 0.0, limiter.cost_in_flight)


TARPIT_MAX_S = 2.0  # an impatient customer's refusal waits at most this long
TARPIT_MAX_HELD = 512  # refusals held at once per replica; past this, answered at once


class Patience:
    """When each customer was told it may come back (its last refusal's ``Retry-After``). The refusal of a
    customer back too early is held until then (at most :data:`TARPIT_MAX_S`; a sleeping coroutine, no CPU), so
    clients that ignore ``Retry-After`` cost the replica one refusal per ``Retry-After`` and connection, not one per
    round trip; a client that waits as told is answered at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.not_before: dict[int | None, float] = {}
        self.held = 0

    async def hold(self, customer: int | None, retry_after: float) -> None:
        now = self.clock()
        wait = min(self.not_before.get(customer, 0.0) - now, TARPIT_MAX_S)
        if len(self.not_before) > 4096:
            self.not_before = {key: at for key, at in self.not_before.items() if at > now}
        self.not_before[customer] = max(self.not_before.get(customer, 0.0), now + retry_after)
        if wait <= 0 or self.held >= TARPIT_MAX_HELD:
            return
        self.held += 1
        try:
            await asyncio.sleep(wait)
        finally:
            self.held -= 1


def _customer(scope: Scope, headers: dict[bytes, bytes]) -> tuple[int | None, int, AppContext | None]:
    """The customer of the token the request presents, if this replica has verified it (no database), with its
    concurrent share; (None, 0, ...) otherwise."""
    app = scope.get("app")
    context: AppContext | None = getattr(getattr(app, "state", None), "context", None)
    if context is None:
        return None, 0, None
    token: str | None = headers.get(b"x-client-token", b"").decode("latin-1")
    if not token:
        try:
            token = presented_token(Headers(raw=list(headers.items())))
        except Unauthenticated:
            return None, 0, context
    principal = context.tokens.known(token) if token else None
    if principal is None:
        return None, 0, context
    limits = context.admission.customers.cached_limits(principal.customer_id)
    share = limits.concurrent_share if limits is not None else context.settings.admission.concurrent_share
    return principal.customer_id, share, context


async def _refuse_at_once(send: Send, path: str, error: Overloaded | RateLimited) -> None:
    """The answer to a refusal at the edge, as ``serve_app/errors.py`` renders it, sent without a response object:
    a flood is answered this way."""
    status = http_status(error)
    body = json.dumps(error_body(path, status, error.detail, error)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + refusal_headers(error)})
    await send({"type": "http.response.body", "body": body})


def _with_rate_headers(scope: Scope, send: Send) -> Send:
    async def send_with_rate(message: Message) -> None:
        if message["type"] == "http.response.start":
            admitted = (scope.get("state") or {}).get(STATE_KEY)
            if isinstance(admitted, Admitted) and admitted.rate is not None:
                headers = list(message.get("headers", []))
                if not any(key.lower() == b"ratelimit" for key, _ in headers):
                    headers += admitted.rate.headers()
                    message = {**message, "headers": headers}
        await send(message)

    return send_with_rate


async def _refuse_while_draining(send: Send) -> None:
    body = json.dumps({"detail": REFUSAL}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

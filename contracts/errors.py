"""Domain errors. Engines, deployments and services raise these; a class says *what* went wrong. The one table
that gives each class its HTTP status (:data:`HTTP_STATUS`) sits at the end of this module because two edges use
it: the ingress's error handlers (``serve_app/errors.py``) and the ``status_code`` of a failed job's webhook
(``cluster/webhooks.py``). Nothing that raises an error chooses a status.

``detail`` is the user-facing message (it reaches the client as ``{"detail": ...}``), so it must name request
fields the way clients send them. An engine does not know those names: where a message depends on the field
(:class:`UnsupportedLanguage`), the error carries the facts and the service names the field.
"""

from __future__ import annotations

import math
from typing import Any


class DomainError(Exception):
    """Base of every error the service answers with a client-visible message."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:  # survives pickling between Ray processes
        return (type(self), (self.detail,))


class InvalidInput(DomainError):
    """The request is malformed or breaks a limit (a bad field, an empty text, too many tokens)."""


class UnsupportedLanguage(InvalidInput):
    """A language code that is unknown, or known but without a model on this server.

    ``field`` is the request field that carried it; services set it with :meth:`for_field` (the same engine check
    serves ``lang_code`` on one route and ``language_code`` on another).
    """

    def __init__(self, code: str, reason: str, field: str | None = None, *, unknown: bool = False) -> None:
        self.code, self.reason, self.field, self.unknown = code, reason, field, unknown
        super().__init__(self._render())

    def _render(self) -> str:
        if self.unknown:
            where = f"field '{self.field}': " if self.field else ""
            return f"Invalid request: {where}unsupported language code '{self.code}'. {self.reason}"
        name = f"{self.field} " if self.field else "language "
        return f"{name}'{self.code}' {self.reason}"

    def for_field(self, field: str) -> UnsupportedLanguage:
        return UnsupportedLanguage(self.code, self.reason, field, unknown=self.unknown)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_language_error, (self.code, self.reason, self.field, self.unknown))


def _rebuild_language_error(code: str, reason: str, field: str | None, unknown: bool) -> UnsupportedLanguage:
    return UnsupportedLanguage(code, reason, field, unknown=unknown)


class LanguageNotServed(InvalidInput):
    """Auto-detection found the audio most likely in a language that has no speech model here (never answered as a
    served language with a confident transcript). The message names what was detected and the setting to add."""


class NotFound(DomainError):
    """The resource does not exist, or belongs to another customer (never told apart)."""


class UnknownModel(NotFound):
    """A request names a model this service does not serve (the OpenAI-compatible routes' ``model``)."""


class TooLarge(DomainError):
    """The payload is larger than a configured limit."""


class UnsupportedMedia(DomainError):
    """A file of a kind the service cannot read."""


class NotAudio(UnsupportedMedia):
    """The upload does not decode as audio."""


class Unauthenticated(DomainError):
    """No token, or a token that is unknown or revoked."""


class Forbidden(DomainError):
    """A credential that may not be used: an unknown, expired or already used Live API client secret, or one
    presented beside another customer's token."""


class Unavailable(DomainError):
    """The capability cannot answer now (not deployed, overloaded, switched off, or a dependency is down)."""


class NotDeployed(Unavailable):
    """The capability's deployment is not part of this service (a refusal before any work: never metered)."""


class ModelMissing(Unavailable):
    """No model is installed for the capability; the message says how to install one."""


class Overloaded(Unavailable):
    """The service refuses the request at once because a bounded queue is full (a deployment's
    ``max_queued_requests``, the ingress's text queue, the live sessions of a replica) or because it is shutting
    down. ``retry_after``: whole seconds after which a retry is worth it (the edge's ``Retry-After``)."""

    def __init__(self, detail: str, retry_after: float = 1.0) -> None:
        super().__init__(detail)
        self.retry_after = whole_seconds(retry_after)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail, self.retry_after))


class RateLimited(DomainError):
    """A limit of the caller's customer is used up: requests per minute, audio seconds per day or live sessions.

    ``retry_after`` (whole seconds) is when the limit frees up again; ``limit`` and ``window_s`` describe the quota
    for the edge's ``RateLimit-Policy``/``RateLimit`` headers (``window_s`` 0: a limit on things at once, which has
    no window); ``reason`` names the limit (usage reports count refusals by it)."""

    def __init__(self, detail: str, retry_after: float, *, limit: int = 0, window_s: int = 0, reason: str = "") -> None:
        super().__init__(detail)
        self.retry_after = whole_seconds(retry_after)
        self.limit, self.window_s, self.reason = limit, window_s, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_rate_limited, (self.detail, self.retry_after, self.limit, self.window_s, self.reason))


def _rebuild_rate_limited(detail: str, retry_after: int, limit: int, window_s: int, reason: str) -> RateLimited:
    return RateLimited(detail, retry_after, limit=limit, window_s=window_s, reason=reason)


def whole_seconds(seconds: float) -> int:
    """A delay as the whole seconds of ``Retry-After`` (RFC 9110): rounded up, at least 1."""
    return max(1, math.ceil(seconds))


class TimedOut(DomainError):
    """The work did not finish within its time limit."""


def find_domain_error(exc: BaseException) -> DomainError | None:
    """The domain error inside ``exc``: Ray wraps exceptions raised in replicas and tasks (``RayTaskError`` keeps
    the original in ``cause``); Python chains them in ``__cause__``/``__context__``."""
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            return None
        if isinstance(current, DomainError):
            return current
        cause = getattr(current, "cause", None)
        if isinstance(cause, DomainError):
            return cause
        current = current.__cause__ or current.__context__
    return None


# The one error -> HTTP status table (a class or its nearest listed base class; anything else is a 500).
HTTP_STATUS: dict[type[DomainError], int] = {
    InvalidInput: 400,  # UnsupportedLanguage too
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    RateLimited: 429,
    TooLarge: 413,
    UnsupportedMedia: 415,  # NotAudio too
    Unavailable: 503,  # ModelMissing and Overloaded too
    TimedOut: 504,
}


def http_status(error: DomainError) -> int:
    for cls in type(error).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500

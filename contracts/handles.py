"""Typed handles: what every one shares.

A typed handle wraps one Serve ``DeploymentHandle`` (a real one, or one from Serve's local testing mode in the
fast tests) and has one method per deployment method, typed with the contract models, so "go to definition" from
a service lands on the contract and a type checker checks both sides. No Ray import is needed: a handle is only
called (``handle.method.remote(...)``), so services and deployments share these classes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, Self, TypeVar

from contracts.capabilities import CapabilityInfo
from contracts.errors import Overloaded, find_domain_error
from contracts.settings import Settings

T = TypeVar("T")
# ray.serve.exceptions.BackPressureError, raised when a deployment's max_queued_requests is full. Matched by the
# class's name (contracts import no Ray); Ray wraps it in RayTaskError(BackPressureError) across processes.
BACKPRESSURE_ERROR = "BackPressureError"
DEFAULT_RETRY_AFTER_S = 1.0  # when the deployment's backpressure_config names no retry_after_s


def overload_of(exc: BaseException) -> Overloaded | None:
    """``exc`` as :class:`Overloaded` when it is (or wraps) Serve's back-pressure refusal, else None."""
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            return None
        # the original first: Ray's RayTaskError(BackPressureError) is a subclass too, but only its ``cause`` holds
        # the refusal's own fields
        for candidate in (getattr(current, "cause", None), current):
            if isinstance(candidate, BaseException) and any(
                cls.__name__ == BACKPRESSURE_ERROR for cls in type(candidate).__mro__
            ):
                return Overloaded(
                    "The service is at capacity: the queue of a model deployment is full. Retry after the "
                    "Retry-After seconds.",
                    _retry_after(candidate),
                )
        current = current.__cause__ or current.__context__
    return None


def _retry_after(error: BaseException) -> float:
    """The deployment's ``backpressure_config.retry_after_s`` carried by the refusal, else the default."""
    retry_after = getattr(error, "_retry_after_s", None)
    if retry_after is None and type(error).__name__ == BACKPRESSURE_ERROR and len(error.args) >= 4:
        retry_after = error.args[3]  # BackPressureError(queued, max_queued, status_code, retry_after_s)
    if isinstance(retry_after, int | float) and not isinstance(retry_after, bool):
        return float(retry_after)
    return DEFAULT_RETRY_AFTER_S


async def call(response: Awaitable[T]) -> T:
    """Await a ``DeploymentResponse``; a domain error raised in the replica comes back as itself, not wrapped in
    Ray's ``RayTaskError``, a full deployment queue (Serve's ``BackPressureError``) as :class:`Overloaded`, and a
    call the caller cancelled ends as ``CancelledError``."""
    try:
        return await response
    except Exception as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # the caller cancelled (asyncio.wait_for's timeout): Serve answers that with its own
            # RequestCancelledError, which would reach the edge as a 500 instead of the caller's timeout
            raise asyncio.CancelledError from exc
        domain = find_domain_error(exc)
        if domain is not None:
            raise domain from None
        overloaded = overload_of(exc)  # the deployment's queue is full: 503 with Retry-After at once
        if overloaded is not None:
            raise overloaded from None
        raise


class DeploymentClient:
    """Base of the typed handles. Subclasses add one method per deployment method, each typed with the
    deployment's contract models (``contracts/``)."""

    deployment: str = ""  # the Serve deployment's name, as /api/v1/health reports it

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.last_answer = 0.0  # monotonic time of the deployment's last answer (a result or its own error)

    @classmethod
    def configured(cls, handle: Any, settings: Settings) -> Self:
        """The typed handle as the ingress's settings tune it (subclasses with options override this)."""
        return cls(handle)

    async def _call(self, response: Awaitable[T]) -> T:
        """:func:`call`, noting when the deployment last answered a call successfully: a busy deployment proves
        itself alive to the health probe by its answers, so the probe need not queue behind them
        (:meth:`answered_within`). An error, a domain error included, proves nothing."""
        result = await call(response)
        self.last_answer = time.monotonic()
        return result

    def answered_within(self, seconds: float) -> bool:
        return self.last_answer > 0 and time.monotonic() - self.last_answer <= seconds

    async def ping(self, timeout: float) -> None:
        await asyncio.wait_for(self._call(self._handle.ping.remote()), timeout)

    async def describe(self, timeout: float) -> list[CapabilityInfo]:
        return await asyncio.wait_for(self._call(self._handle.describe.remote()), timeout)

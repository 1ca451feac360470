"""Typed handles: what every one shares.

A typed handle wraps one Serve ``DeploymentHandle`` (a real one, or one from Serve's local testing mode in the
fast tests) and has one method per deployment method, typed with the contract models, so "go to definition" from
a service lands on the contract and a type checker checks both sides. No Ray import is needed: a handle is only
called (``handle.method.remote(...)``), so services and deployments share these classes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Self, TypeVar

from contracts.capabilities import CapabilityInfo
from contracts.errors import find_domain_error
from contracts.settings import Settings

T = TypeVar("T")


async def call(response: Awaitable[T]) -> T:
    """Await a ``DeploymentResponse``; a domain error raised in the replica comes back as itself, not wrapped in
    Ray's ``RayTaskError``, and a call the caller cancelled ends as ``CancelledError``."""
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
        raise


class DeploymentClient:
    """Base of the typed handles. Subclasses add one method per deployment method, each typed with the
    deployment's contract models (``contracts/``)."""

    deployment: str = ""  # the Serve deployment's name, as /api/v1/health reports it

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @classmethod
    def configured(cls, handle: Any, settings: Settings) -> Self:
        """The typed handle as the ingress's settings tune it (subclasses with options override this)."""
        return cls(handle)

    async def ping(self, timeout: float) -> None:
        await asyncio.wait_for(call(self._handle.ping.remote()), timeout)

    async def describe(self, timeout: float) -> list[CapabilityInfo]:
        return await asyncio.wait_for(call(self._handle.describe.remote()), timeout)

"""How ``khuluma serve`` tells every ingress replica, on every node, that a graceful stop has begun.

``khuluma serve`` creates one small actor, :class:`Lifecycle`, named :data:`ACTOR_NAME` in namespace
:data:`NAMESPACE`, before it deploys the application. Each ingress replica looks it up when it starts
(:func:`watch`) and leaves one call waiting on it (:meth:`Lifecycle.wait_for_drain`). On SIGTERM/SIGINT the command
calls :meth:`Lifecycle.drain`: every waiting call returns at once with the grace period, each replica drains
(``serve_app/lifecycle.py``: no new requests or live sessions, open sessions closed with 1001, requests in flight
finish) and reports :meth:`Lifecycle.done`; the command waits for :meth:`Lifecycle.drained` (or the grace period)
before it stops Serve and Ray.

Without the actor (the application deployed with ``serve deploy``/``serve run``, or the unit tests) nothing waits:
Serve's own graceful shutdown applies. The actor belongs to the ``khuluma serve`` driver and dies with it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("khuluma.lifecycle")

ACTOR_NAME = "khuluma-lifecycle"
NAMESPACE = "khuluma"


class Lifecycle:
    """The drain signal and the replicas' reports (an async actor: each method runs on its event loop)."""

    def __init__(self) -> None:
        self._drain = asyncio.Event()
        self._grace_s = 0.0
        self._replicas: dict[str, bool] = {}  # replica -> done draining
        self._actors: dict[str, tuple[str, str]] = {}  # replica -> its Ray actor's (name, namespace)

    async def register(self, replica: str, actor: tuple[str, str] | None = None) -> None:
        self._replicas.setdefault(replica, False)
        if actor is not None:
            self._actors[replica] = actor

    async def wait_for_drain(self) -> float:
        """Returns when a graceful stop begins: the grace period in seconds."""
        await self._drain.wait()
        return self._grace_s

    async def drain(self, grace_s: float) -> int:
        """Begin the graceful stop; returns how many replicas are told."""
        self._grace_s = grace_s
        self._drain.set()
        return len(self._replicas)

    async def done(self, replica: str) -> None:
        self._replicas[replica] = True

    async def drained(self) -> bool:
        """Every registered replica has finished (or given up on) its requests in flight, or is gone: Serve may
        have replaced a replica since it registered, and a dead one never reports."""
        for replica, done in list(self._replicas.items()):
            if not done and replica in self._actors and not await asyncio.to_thread(_alive, *self._actors[replica]):
                self._replicas[replica] = True
        return all(self._replicas.values())


def _alive(name: str, namespace: str) -> bool:
    import ray

    try:
        ray.get_actor(name, namespace)
        return True
    except ValueError:  # no live actor of that name
        return False


def start_actor() -> Any:
    """Create the actor (in the ``khuluma serve`` driver, after ``ray.init``); returns its handle."""
    import ray

    actor = ray.remote(Lifecycle).options(
        num_cpus=0, max_concurrency=1000, name=ACTOR_NAME, namespace=NAMESPACE, get_if_exists=True
    )
    return actor.remote()


async def watch(on_drain: Callable[[float], Awaitable[None]]) -> None:
    """In an ingress replica: wait for a graceful stop and run ``on_drain(grace_s)``, then report done. Returns at
    once when ``khuluma serve`` did not start the actor, and quietly when the actor goes away (its driver ended)."""
    import ray

    try:
        actor = await asyncio.to_thread(ray.get_actor, ACTOR_NAME, NAMESPACE)
    except Exception:  # noqa: BLE001 - no such actor (not started by khuluma serve), or no Ray at all
        return
    replica = uuid.uuid4().hex
    context = ray.get_runtime_context()
    name = context.get_actor_name() if context.get_actor_id() else None
    try:
        await actor.register.remote(replica, (name, context.namespace) if name else None)
        grace_s = await actor.wait_for_drain.remote()
    except Exception:  # noqa: BLE001 - the driver is gone (Ray stops everything itself then)
        return
    try:
        await on_drain(float(grace_s))
    except Exception:  # report done anyway: the command must not wait out the grace period for it
        log.exception("draining failed")
    try:
        await actor.done.remote(replica)
    except Exception:  # noqa: BLE001 - the driver is gone
        return

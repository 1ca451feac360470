"""How ``khuluma serve`` tells every ingress replica, on every node, that a graceful stop has begun.

``khuluma serve`` creates one small actor, :class:`GracefulStop`, named :data:`ACTOR_NAME` in namespace
:data:`NAMESPACE`, before it deploys the application. Each ingress replica looks it up when it starts
(:func:`watch`) and leaves one call waiting on it (:meth:`GracefulStop.wait_for_drain`). On SIGTERM/SIGINT the command
calls :meth:`GracefulStop.drain`: every waiting call returns at once with the grace period, each replica drains
(``serve_app/lifecycle.py``: no new requests or live sessions, open sessions closed with 1001, requests in flight
finish) and reports :meth:`GracefulStop.done`; the command waits for :meth:`GracefulStop.drained` (or the grace period)
before it stops Serve and Ray.

A replica that Serve replaced after it registered never reports, so :meth:`GracefulStop.drained` counts a
registered replica whose Ray actor is gone as done. It looks the actor up by name in the namespace where Serve
created it (:data:`SERVE_NAMESPACE`), not in the job's namespace that the replica's runtime context reports: the
name is never found there. A replica whose actor cannot be found when it registers is never presumed gone: the
stop waits for its report or the grace period.

Without the actor (the application deployed with ``serve deploy``/``serve run``, or the unit tests) nothing waits:
Serve's own graceful shutdown applies. The actor belongs to the ``khuluma serve`` driver and dies with it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

ACTOR_NAME = "khuluma-lifecycle"
NAMESPACE = "khuluma"
SERVE_NAMESPACE = "serve"  # where Serve creates its replicas' actors (ray.serve._private.constants.SERVE_NAMESPACE)


class GracefulStop:
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
    """Whether the named actor is there; only a definite "no such actor" says it is gone (an error reaching the GCS
    on a loaded machine must not end the wait for a replica still serving)."""
    import ray

    try:
        ray.get_actor(name, namespace)
        return True
    except ValueError:  # no live actor of that name
        return False
    except Exception:  # noqa: BLE001 - unknown: presumed alive, it reports or the grace period ends
        return True


def own_actor() -> tuple[str, str] | None:
    """This worker's actor as (name, namespace), where ``ray.get_actor`` finds it: a Serve replica's namespace is
    Serve's own (:data:`SERVE_NAMESPACE`), whatever the runtime context's ``namespace`` (the job's) says. None when
    this is no named actor, or its name is found in neither (then it is never presumed gone)."""
    import ray

    context = ray.get_runtime_context()
    name = context.get_actor_name() if context.get_actor_id() else None
    if not name:
        return None
    for namespace in dict.fromkeys((SERVE_NAMESPACE, context.namespace)):
        try:
            ray.get_actor(name, namespace)
        except ValueError:  # not in this namespace
            continue
        except Exception:  # noqa: BLE001 - not known: never presumed gone then
            return None
        return name, namespace
    return None


def start_actor() -> Any:
    """Create the actor (in the ``khuluma serve`` driver, after ``ray.init``); returns its handle."""
    import ray

    actor = ray.remote(GracefulStop).options(
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
    try:
        await actor.register.remote(replica, await asyncio.to_thread(own_actor))
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

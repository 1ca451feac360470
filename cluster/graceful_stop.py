"""How ``khuluma serve`` tells every ingress replica, on every node, that a graceful stop has begun.

The signal and the replicas' reports live in Ray's key-value store (the GCS, namespace :data:`NAMESPACE`), so the
stop needs no process of its own. Keys, under one stop's prefix ``stop/<id>/`` (:class:`StopBoard`):

- :data:`CURRENT` holds the id of the ``khuluma serve`` run that owns the cluster's graceful stop; the command writes
  it before it deploys the application (:func:`begin`);
- ``stop/<id>/replica/<uuid>``: one ingress replica, registered when it starts (:func:`watch`): its Ray actor
  (name and namespace, or none) and whether it has drained;
- ``stop/<id>/drain``: the grace period in seconds, written on SIGTERM/SIGINT (:meth:`StopBoard.drain`).

Each replica polls its stop's drain key every :data:`POLL_S`; once it is there the replica drains
(``serve_app/lifecycle.py``: no new requests or live sessions, open sessions closed with 1001, requests in flight
finish) and marks itself done. The command waits for :meth:`StopBoard.drained` (or the grace period), stops Serve,
removes its keys (:meth:`StopBoard.clear`) and then stops Ray.

A replica that Serve replaced after it registered never reports, so :meth:`StopBoard.drained` counts a registered
replica whose Ray actor is gone as done. It looks the actor up by name in the namespace where Serve created it
(:data:`SERVE_NAMESPACE`), not in the job's namespace that the replica's runtime context reports: the name is never
found there. A replica whose actor cannot be found when it registers is never presumed gone: the stop waits for its
report or the grace period.

Without :data:`CURRENT` (the application deployed with ``serve deploy``/``serve run``, or the unit tests) nothing
waits: Serve's own graceful shutdown applies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger(__name__)

NAMESPACE = "khuluma"
CURRENT = "stop/current"
SERVE_NAMESPACE = "serve"  # where Serve creates its replicas' actors (ray.serve._private.constants.SERVE_NAMESPACE)
POLL_S = 0.25  # how soon a replica hears that the stop began
KV_TIMEOUT_S = 10.0  # one call to the GCS; a replica asks again at its next poll


class KeyValue(Protocol):
    """The store the stop is told through: Ray's GCS (:class:`RayKeyValue`) in the service."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...

    def keys(self, prefix: str) -> list[str]: ...

    def delete_prefix(self, prefix: str) -> None: ...


class RayKeyValue:
    """Ray's internal key-value store (in the GCS) under :data:`NAMESPACE`, each call bounded in time."""

    def __init__(self) -> None:
        import ray
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # the client Serve's own key-value store uses

        self._gcs = GcsClient(address=ray.get_runtime_context().gcs_address)
        self._namespace = NAMESPACE.encode()

    def get(self, key: str) -> bytes | None:
        value: bytes | None = self._gcs.internal_kv_get(key.encode(), self._namespace, timeout=KV_TIMEOUT_S)
        return value

    def put(self, key: str, value: bytes) -> None:
        self._gcs.internal_kv_put(key.encode(), value, True, self._namespace, timeout=KV_TIMEOUT_S)

    def keys(self, prefix: str) -> list[str]:
        found = self._gcs.internal_kv_keys(prefix.encode(), self._namespace, timeout=KV_TIMEOUT_S)
        return [key.decode() for key in found]

    def delete_prefix(self, prefix: str) -> None:
        self._gcs.internal_kv_del(prefix.encode(), True, self._namespace, timeout=KV_TIMEOUT_S)


class StopBoard:
    """One graceful stop's keys: the drain signal and the replicas' registrations and reports."""

    def __init__(self, kv: KeyValue, stop_id: str) -> None:
        self.kv, self.stop_id = kv, stop_id
        self._prefix = f"stop/{stop_id}/"

    # ------------------------------------------------------------------ a replica's side

    def register(self, replica: str, actor: tuple[str, str] | None) -> None:
        self._put_replica(replica, actor, done=False)

    def grace_period(self) -> float | None:
        """The grace period in seconds once the stop has begun; None before."""
        value = self.kv.get(self._prefix + "drain")
        return None if value is None else float(value)

    def done(self, replica: str, actor: tuple[str, str] | None) -> None:
        self._put_replica(replica, actor, done=True)

    def _put_replica(self, replica: str, actor: tuple[str, str] | None, done: bool) -> None:
        record = {"actor": list(actor) if actor else None, "done": done}
        self.kv.put(f"{self._prefix}replica/{replica}", json.dumps(record).encode())

    # ------------------------------------------------------------------ the command's side

    def drain(self, grace_s: float) -> int:
        """Begin the graceful stop; returns how many replicas are told."""
        self.kv.put(self._prefix + "drain", repr(float(grace_s)).encode())
        return len(self.kv.keys(self._prefix + "replica/"))

    def drained(self) -> bool:
        """Every registered replica has finished (or given up on) its requests in flight, or is gone: Serve may
        have replaced a replica since it registered, and a dead one never reports."""
        for key in self.kv.keys(self._prefix + "replica/"):
            value = self.kv.get(key)
            if value is None:  # removed meanwhile
                continue
            record = json.loads(value)
            if record["done"]:
                continue
            if record["actor"] is None or _alive(*record["actor"]):
                return False
        return True

    def clear(self) -> None:
        """Remove this stop's keys (and :data:`CURRENT` while it names this stop)."""
        if self.kv.get(CURRENT) == self.stop_id.encode():
            self.kv.delete_prefix(CURRENT)
        self.kv.delete_prefix(self._prefix)


def begin(kv: KeyValue | None = None) -> StopBoard:
    """In the ``khuluma serve`` driver, after ``ray.init`` and before the application is deployed: a new stop
    that the replicas about to start will watch."""
    kv = kv or RayKeyValue()
    board = StopBoard(kv, uuid.uuid4().hex)
    kv.put(CURRENT, board.stop_id.encode())
    return board


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


def _current(kv_factory: Callable[[], KeyValue]) -> StopBoard | None:
    kv = kv_factory()
    stop_id = kv.get(CURRENT)
    return None if stop_id is None else StopBoard(kv, stop_id.decode())


async def watch(
    on_drain: Callable[[float], Awaitable[None]],
    kv_factory: Callable[[], KeyValue] = RayKeyValue,
    actor: Callable[[], tuple[str, str] | None] = own_actor,
) -> None:
    """In an ingress replica: wait for a graceful stop and run ``on_drain(grace_s)``, then report done. Returns at
    once when no ``khuluma serve`` owns the stop (or there is no Ray at all)."""
    try:
        board = await asyncio.to_thread(_current, kv_factory)
    except Exception:  # noqa: BLE001 - no Ray here (Serve's local testing mode)
        return
    if board is None:
        return
    replica = uuid.uuid4().hex
    try:
        own = await asyncio.to_thread(actor)
        await asyncio.to_thread(board.register, replica, own)
    except Exception:
        log.warning("could not register for a graceful stop", exc_info=True)
        return
    grace_s = await _wait_for_drain(board)
    try:
        await on_drain(grace_s)
    except Exception:  # report done anyway: the command must not wait out the grace period for it
        log.exception("draining failed")
    try:
        await asyncio.to_thread(board.done, replica, own)
    except Exception:  # noqa: BLE001 - the GCS is gone
        return


async def _wait_for_drain(board: StopBoard) -> float:
    while True:
        try:
            grace_s = await asyncio.to_thread(board.grace_period)
        except Exception:  # noqa: BLE001 - a slow or passing GCS error: ask again at the next poll
            grace_s = None
        if grace_s is not None:
            return grace_s
        await asyncio.sleep(POLL_S)

"""How the ingress reaches model deployments, whether they run as Ray Serve replicas or in-process.

``Backend.call("method", ...)`` awaits ``handle.method.remote(...)`` for a Ray Serve ``DeploymentHandle`` and
calls the method directly (in a worker thread if it is synchronous) for a plain object. The ingress and the
services therefore know no model and no Ray: they know capability names and method names.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from dataclasses import dataclass, fields
from typing import Any

import anyio

from contracts.errors import Unavailable, find_domain_error


def _is_handle(target: Any) -> bool:
    return type(target).__name__ in ("DeploymentHandle", "DeploymentResponseHandle") or hasattr(target, "remote")


class Backend:
    def __init__(self, target: Any, name: str) -> None:
        self._target = target
        self.name = name
        self._handle = _is_handle(target)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            if self._handle:
                return await getattr(self._target, method).remote(*args, **kwargs)
            fn = getattr(self._target, method)
            if inspect.iscoroutinefunction(fn):
                return await fn(*args, **kwargs)
            result = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
            if inspect.isawaitable(result):
                return await result
            return result
        except Exception as exc:  # surface the engine's DomainError, not Ray's wrapper
            api_error = find_domain_error(exc)
            if api_error is not None:
                raise api_error from None
            raise

    async def call_with_timeout(self, timeout: float, method: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.wait_for(self.call(method, *args, **kwargs), timeout)

    def __getattr__(self, method: str):  # backend.ner(text) == backend.call("ner", text)
        if method.startswith("_"):
            raise AttributeError(method)
        return functools.partial(self.call, method)


def as_backend(target: Any, name: str = "backend") -> Backend | None:
    """Wrap a handle/object (used by deployments that call other deployments, e.g. search -> embeddings)."""
    if target is None or isinstance(target, Backend):
        return target
    return Backend(target, name)


@dataclass
class Backends:
    """One entry per model deployment; ``None`` where a capability is not deployed."""

    text: Backend | None = None
    embeddings: Backend | None = None
    translation: Backend | None = None
    transcription: Backend | None = None
    knowledge: Backend | None = None
    jobs: Backend | None = None
    batch: Backend | None = None

    def require(self, name: str) -> Backend:
        backend = getattr(self, name)
        if backend is None:
            raise Unavailable(f"The {name} capability is not deployed in this service.")
        return backend

    def items(self) -> list[tuple[str, Backend]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None]

    @classmethod
    def wrap(cls, **targets: Any) -> Backends:
        return cls(**{k: as_backend(v, k) for k, v in targets.items() if v is not None})

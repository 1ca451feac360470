"""The Ray Serve ingress deployment: the FastAPI app, with typed handles to the model deployments."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import FastAPI
from ray import serve

from cluster import graceful_stop
from contracts.logs import configure_logging
from contracts.settings import Settings
from contracts.settings.variables import report_setting_warnings
from serve_app.app import create_app
from serve_app.context import AppContext, Clients, build_context
from serve_app.in_process import serve_in_process
from serve_app.lifecycle import SHUTTING_DOWN
from serve_app.middleware import current_request_id

log = logging.getLogger(__name__)


@serve.ingress()
class Ingress:
    def __init__(self, settings: dict[str, Any], **handles: Any) -> None:
        self.settings = Settings.from_bound(settings)
        configure_logging("Ingress", current_request_id, self.settings.log_level)
        report_setting_warnings(logging.getLogger("khuluma.settings").warning)  # unknown KHULUMA_* names, once
        clients = Clients.from_handles(self.settings, **handles)
        serve_in_process(self.settings, clients)  # engines run here where set (text.ner_in_ingress)
        self.context = build_context(self.settings, clients)
        self.context.db.require_current_schema()  # migrations run once before the app starts, never here
        # a graceful stop of `khuluma serve` reaches every ingress replica through Ray's key-value store (Serve
        # constructs a replica on its event loop, as deployments/jobs.py relies on too)
        self._watcher: asyncio.Task[None] | None = None
        try:
            self._watcher = asyncio.get_running_loop().create_task(
                graceful_stop.watch(self._drain), name="graceful-stop"
            )
        except RuntimeError:
            log.warning("no event loop at start: a graceful stop will not drain this replica")

    async def _drain(self, grace_s: float) -> None:
        await drain_replica(self.context, grace_s)

    def __del__(self) -> None:
        """Serve calls this on a graceful replica shutdown: usage rows not yet written go now."""
        context = getattr(self, "context", None)
        if context is not None:
            context.usage.close()

    def __serve_build_asgi_app__(self) -> FastAPI:  # called by Serve after __init__
        app = create_app(self.settings, drain=self.context.drain, capacity=self.context.admission.capacity)
        app.state.context = self.context
        return app


async def drain_replica(ctx: AppContext, grace_s: float) -> bool:
    """This replica's part of a graceful stop: admit nothing new, close the live sessions (1001), and wait up to
    ``grace_s`` for the requests in flight; whether they all finished."""
    ctx.drain.begin()
    closed = ctx.admission.live.close_all(SHUTTING_DOWN)
    log.info("draining: %d live sessions closed, %d requests in flight", closed, ctx.drain.in_flight)
    started = time.monotonic()
    idle = await ctx.drain.wait_idle(grace_s)
    if idle:
        log.info("drained: nothing in flight after %.1f s", time.monotonic() - started)
    else:
        log.warning("draining: %d requests still in flight after %.0f s", ctx.drain.in_flight, grace_s)
    try:
        await ctx.usage.flush()  # the usage of what just finished
    except Exception:  # written at the replica's shutdown (__del__) instead
        log.warning("usage rows not written while draining", exc_info=True)
    return idle

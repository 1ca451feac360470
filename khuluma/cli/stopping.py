"""How ``khuluma serve`` stops: the signals it takes, the drain of the ingress replicas and the clean-ups.

The first SIGINT, SIGTERM or SIGHUP asks for a graceful stop, a second one hurries it (:class:`StopSignals`). The
command tells every ingress replica to drain and waits for them (:func:`drain`), then runs its clean-ups in reverse
order of starting, each bounded in time (:func:`stop_everything`: Serve, the graceful stop's keys, Ray, SeaweedFS),
and stops any process it started that is still there.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from cluster.graceful_stop import StopBoard

console = Console(stderr=True)


class StopRequested(BaseException):
    """A stop asked for while the service was still starting."""


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP: the first asks for a graceful stop (:attr:`stopping`), any later one to hurry
    (:attr:`hurrying`). While the service starts, the first stops the start after its current step
    (:meth:`check`) and a second interrupts that step at once (:class:`StopRequested`, raised in the main thread).

    The handler only sets flags (plain attributes: no lock a signal could meet already held); the main thread
    polls them."""

    def __init__(self) -> None:
        self.stopping = False
        self.hurrying = False
        self._starting = True

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._received)

    def serving(self) -> None:
        self._starting = False

    def check(self) -> None:
        """During start-up: stop starting if a signal came."""
        if self.stopping:
            self._starting = False
            raise StopRequested

    def _received(self, signum: int, _frame: Any) -> None:
        if self.stopping:
            self.hurrying = True
            if self._starting:
                self._starting = False  # once: the clean-up that follows is not interrupted the same way
                raise StopRequested
        self.stopping = True


def drain(stop_board: StopBoard | None, grace_s: float, signals: StopSignals) -> None:
    """Tell every ingress replica to drain, and wait until they report their requests done, the grace period
    ends (plus a little for their reports) or a second signal comes."""
    if stop_board is None:
        return
    deadline = time.monotonic() + grace_s + 2
    try:
        stop_board.drain(grace_s)
        while not signals.hurrying and time.monotonic() < deadline:
            try:
                if stop_board.drained():
                    return
            except Exception:  # noqa: BLE001 - a slow answer on a loaded machine: ask again, within the grace period
                pass
            time.sleep(0.2)
    except Exception as exc:  # noqa: BLE001 - Ray is already going: stop the rest anyway
        console.print(f"[yellow]drain: {type(exc).__name__}: {exc}[/]")
    else:
        if not signals.hurrying:
            console.print(f"[yellow]drain: requests still in flight after {grace_s:g} s; stopping anyway[/]")


@dataclass(frozen=True)
class Cleanup:
    """One thing to stop, in reverse order of starting. ``graceful``: skipped by a second signal (the processes
    are then stopped without it). ``prepare``: run in this thread just before, unbounded: what ``run`` must not do
    in the thread a second signal may abandon."""

    name: str
    run: Callable[[], Any]
    limit_s: float = 60.0
    graceful: bool = False
    prepare: Callable[[], Any] | None = None


def stop_everything(cleanups: list[Cleanup], signals: StopSignals, serve_timeout_s: float | None = None) -> None:
    """Run the clean-ups (Serve, Ray, storage; each bounded in time, and Serve's skipped by a second signal), then
    stop any process this command started that is still there (SIGTERM, then SIGKILL): HAProxy, which Serve starts
    in a session of its own, and anything Ray or SeaweedFS left behind."""
    if signals.hurrying:
        console.print("Stopping now (a second signal).")
    started = _our_processes()  # listed while they run: once their parents exit, they are no longer below us
    for cleanup in reversed(cleanups):
        if cleanup.graceful and signals.hurrying:
            console.print(f"cleanup: {cleanup.name} skipped")
            continue
        if cleanup.prepare is not None:
            cleanup.prepare()
        limit = serve_timeout_s if serve_timeout_s is not None and cleanup.graceful else cleanup.limit_s
        _bounded(cleanup, limit, signals)
    cleanups.clear()
    _terminate([p for p in {*started, *_our_processes()} if p.is_running()])


def _bounded(cleanup: Cleanup, limit_s: float, signals: StopSignals) -> None:
    """Run one clean-up in a thread; stop waiting for a graceful one after ``limit_s`` or a second signal, for any
    other after ``limit_s``."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            cleanup.run()
        except BaseException as exc:  # noqa: BLE001 - told below, the next clean-up still runs
            errors.append(exc)

    worker = threading.Thread(target=run, name=f"cleanup-{cleanup.name}", daemon=True)
    worker.start()
    deadline = time.monotonic() + limit_s
    while worker.is_alive() and time.monotonic() < deadline:
        if cleanup.graceful and signals.hurrying:
            break
        worker.join(0.2)
    if worker.is_alive():
        console.print(f"[yellow]cleanup: {cleanup.name} did not finish; going on[/]")
    for exc in errors:
        console.print(f"[yellow]cleanup: {cleanup.name}: {exc}[/]")


def _our_processes() -> set[Any]:
    """Every process below this one and of the sessions they lead: with this process leading its own session (as
    :func:`khuluma.cli.supervise.split` makes it), Ray's daemons that outlived their parent too; never this process."""
    from runtime.processes import started_processes

    return started_processes(os.getpid(), include_root=False)


def _terminate(processes: list[Any], grace_s: float = 5.0) -> None:
    from runtime.processes import terminate

    if not processes:
        return
    console.print(f"Stopping {len(processes)} process(es) left behind ...")
    terminate(processes, grace_s)


def serve_cleanup() -> Cleanup:
    """Serve's graceful shutdown (its replicas run their destructors: usage rows, BM25 snapshots), from this process.
    Serve's client is imported when the stop reaches it, not held while the process waits (a one-off task would
    have to start a worker first: about 2 s more of the stop); imported in this thread, because a second signal
    abandons the clean-up's thread, and the client, finding Ray stopped by then, would start a new one
    (``ray.serve.context._connect``)."""
    return Cleanup("Serve", _stop_serve, limit_s=60, graceful=True, prepare=_import_serve)


def _import_serve() -> None:
    import ray.serve  # noqa: F401


def _stop_serve() -> None:
    import ray
    from ray import serve

    if ray.is_initialized():  # else Serve's client would start a Ray of its own to stop
        serve.shutdown()

"""The parts of ``khuluma serve``'s graceful stop that need no Ray: the supervisor that keeps the service out of
reach of a signal to the command's process group, and how signals become a stop and a hurry. The whole stop, on a
real service, is tests/integration/test_graceful_stop.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from khuluma.cli.stopping import StopRequested, StopSignals
from khuluma.cli.supervise import split

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from khuluma.cli.supervise import split
split(force=True)
got = []
def on(signum, frame):
    got.append(signum)
    with open({out!r}, "a") as f:
        f.write(f"{{signum}}\\n")
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, on)
with open({ready!r} + ".tmp", "w") as f:
    f.write(f"{{os.getpid()}} {{os.getsid(0)}} {{os.getpgrp()}}")
os.rename({ready!r} + ".tmp", {ready!r})
deadline = time.monotonic() + 30
while len(got) < {wanted} and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(3 if len(got) == {wanted} else 9)
"""


def _start(tmp_path: Path, wanted: int) -> tuple[subprocess.Popen[bytes], int, int, int, Path]:
    out, ready = tmp_path / "signals", tmp_path / "ready"
    code = CHILD.format(root=str(ROOT), out=str(out), ready=str(ready), wanted=wanted)
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the child did not start"
        time.sleep(0.02)
    pid, sid, pgid = (int(x) for x in ready.read_text().split())
    return proc, pid, sid, pgid, out


def _received(out: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = [int(line) for line in out.read_text().split()] if out.exists() else []
        if len(got) >= count:
            return got
        time.sleep(0.02)
    return [int(line) for line in out.read_text().split()] if out.exists() else []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor is Linux only")
def test_a_signal_to_the_whole_group_reaches_the_service_once_per_signal(tmp_path: Path) -> None:
    proc, pid, sid, pgid, out = _start(tmp_path, wanted=2)
    assert pid != proc.pid and sid == pid and pgid == pid  # the service leads a session and group of its own
    assert os.getpgid(proc.pid) == proc.pid != pgid  # the command's pid stays in the group it was started in
    os.killpg(proc.pid, signal.SIGTERM)  # what a terminal, `kill -TERM -<pgid>` or a process manager does
    assert _received(out, 1) == [signal.SIGTERM]  # forwarded once, not received twice
    os.killpg(proc.pid, signal.SIGINT)  # the second: hurry
    assert _received(out, 2) == [signal.SIGTERM, signal.SIGINT]
    assert proc.wait(30) == 3  # the service's exit status is the command's


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor is Linux only")
def test_the_service_stops_gracefully_when_its_supervisor_is_killed(tmp_path: Path) -> None:
    proc, pid, _, _, out = _start(tmp_path, wanted=1)
    proc.kill()  # SIGKILL: nothing can be forwarded
    proc.wait(10)
    assert _received(out, 1) == [signal.SIGTERM]  # the kernel's parent-death signal
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the service did not exit")


def test_the_first_signal_stops_the_second_hurries() -> None:
    signals = StopSignals()
    signals.check()  # nothing yet
    signals._received(signal.SIGTERM, None)
    assert signals.stopping and not signals.hurrying
    with pytest.raises(StopRequested):  # while starting: the start stops after its current step
        signals.check()
    signals = StopSignals()
    signals._received(signal.SIGTERM, None)
    with pytest.raises(StopRequested):  # a second while starting interrupts the step at once
        signals._received(signal.SIGINT, None)
    assert signals.hurrying
    signals._received(signal.SIGINT, None)  # once only: the clean-up that follows is not interrupted
    serving = StopSignals()
    serving.serving()
    serving._received(signal.SIGINT, None)
    serving._received(signal.SIGINT, None)  # serving: flags only, never an exception
    assert serving.stopping and serving.hurrying


def test_the_stop_runs_each_cleanup_bounded_and_stops_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    from khuluma.cli import stopping

    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # e.g. an HAProxy left behind
    monkeypatch.setattr(stopping, "_our_processes", lambda: {psutil.Process(left.pid)})
    order: list[str] = []

    def prepared(name: str) -> None:  # in the stopping thread, which a second signal never abandons
        order.append(f"{name} prepared" if threading.current_thread() is threading.main_thread() else "elsewhere")

    cleanups = [
        stopping.Cleanup("storage", lambda: order.append("storage")),
        stopping.Cleanup("ray", lambda: order.append("ray"), prepare=lambda: prepared("ray")),
        stopping.Cleanup("slow", lambda: time.sleep(30), limit_s=0.5),
        stopping.Cleanup("serve", lambda: order.append("serve"), graceful=True, prepare=lambda: prepared("serve")),
    ]
    signals = StopSignals()
    signals.hurrying = True  # a second signal: no graceful Serve shutdown, nor its preparation
    started = time.monotonic()
    stopping.stop_everything(cleanups, signals)
    # in reverse order of starting, each prepared just before it runs, the slow one given up on
    assert order == ["ray prepared", "ray", "storage"] and cleanups == []
    assert time.monotonic() - started < 10
    left.wait(10)  # stopped, not left behind (the stop reaped it: its status is no longer ours to read)
    assert not psutil.pid_exists(left.pid) or psutil.Process(left.pid).status() == psutil.STATUS_ZOMBIE


class MemoryKeyValue:
    """Ray's key-value store as a dict (``cluster.graceful_stop.KeyValue``); the service's own runs in
    ``tests/integration/test_graceful_stop.py``."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.data if k.startswith(prefix)]

    def delete_prefix(self, prefix: str) -> None:
        for key in self.keys(prefix):
            del self.data[key]


def test_the_stop_tells_every_replica_and_knows_when_they_are_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cluster/graceful_stop.py``: watching replicas hear the grace period within a poll; the stop waits until each
    has reported, and its keys go with it."""
    import asyncio

    from cluster import graceful_stop

    monkeypatch.setattr(graceful_stop, "POLL_S", 0.01)
    kv = MemoryKeyValue()
    board = graceful_stop.begin(kv)
    release: dict[str, asyncio.Event] = {}
    heard: list[float] = []

    async def go() -> None:
        def replica(name: str) -> asyncio.Task[None]:
            release[name] = asyncio.Event()

            async def on_drain(grace_s: float) -> None:
                heard.append(grace_s)
                await release[name].wait()  # its requests in flight

            return asyncio.ensure_future(graceful_stop.watch(on_drain, lambda: kv, lambda: None))

        watching = [replica("a"), replica("b")]
        await asyncio.sleep(0.05)
        assert not heard and not board.drained()
        assert board.drain(12.5) == 2
        await asyncio.sleep(0.05)
        assert heard == [12.5, 12.5]
        release["a"].set()
        await asyncio.sleep(0.05)
        assert not board.drained()
        release["b"].set()
        await asyncio.gather(*watching)
        assert board.drained()

    asyncio.run(go())
    board.clear()
    assert kv.data == {}


def test_without_khuluma_serve_a_replica_does_not_wait() -> None:
    """Deployed with ``serve deploy`` (no stop begun) or without Ray: the watch returns at once."""
    import asyncio

    from cluster import graceful_stop

    async def never(grace_s: float) -> None:
        raise AssertionError("drained without a stop")

    def no_ray() -> graceful_stop.KeyValue:
        raise RuntimeError("Ray has not been started")

    asyncio.run(asyncio.wait_for(graceful_stop.watch(never, MemoryKeyValue, lambda: None), 1))
    asyncio.run(asyncio.wait_for(graceful_stop.watch(never, no_ray, lambda: None), 1))


def test_a_replica_is_looked_up_where_serve_created_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Serve replica's actor lives in Serve's namespace while its runtime context names the job's. Looked up
    under the job's, every replica seemed gone as soon as the stop began, and ``khuluma serve`` stopped Serve and
    its HAProxy with the requests and live sessions still in flight (issue #30). Only a definite "no such actor"
    counts a replica as gone; one that cannot be found when it registers is never presumed gone."""
    import ray

    from cluster import graceful_stop

    name = "SERVE_REPLICA::khuluma#Ingress#abc123"
    actors = {(name, graceful_stop.SERVE_NAMESPACE)}

    class Context:
        namespace = "0b5c4a6e-the-job-s-own"

        def get_actor_id(self) -> str:
            return "f00d"

        def get_actor_name(self) -> str:
            return name

    def get_actor(actor: str, namespace: str | None = None) -> object:
        if (actor, namespace) not in actors:
            raise ValueError(f"Failed to look up actor {actor!r} in namespace {namespace!r}")
        return object()

    monkeypatch.setattr(ray, "get_runtime_context", Context)
    monkeypatch.setattr(ray, "get_actor", get_actor)
    own = graceful_stop.own_actor()
    assert own == (name, "serve")

    board = graceful_stop.begin(MemoryKeyValue())
    board.register("a", own)
    board.drain(30)
    assert not board.drained()  # alive, and not done: the stop waits
    actors.clear()  # Serve replaced it: it never reports
    assert board.drained()
    assert graceful_stop.own_actor() is None  # found nowhere: registered without an actor, never presumed gone
    board.register("b", None)
    assert not board.drained()

    def unreachable(actor: str, namespace: str | None = None) -> object:
        raise RuntimeError("GCS did not answer")

    monkeypatch.setattr(ray, "get_actor", unreachable)
    assert graceful_stop._alive(name, "serve")  # not known: presumed alive (it reports, or the grace period ends)
    assert graceful_stop.own_actor() is None


def test_the_split_is_refused_in_a_process_that_is_not_the_command() -> None:
    """Called in-process (a CliRunner in pytest), ``khuluma serve`` must not fork: the caller would become the
    supervisor and go on in a child without its thread pools."""
    from khuluma.cli.supervise import _own_process

    assert not _own_process()
    pid, session = os.getpid(), os.getsid(0)
    split()
    assert (os.getpid(), os.getsid(0)) == (pid, session)  # no fork, no new session: still pytest's own process

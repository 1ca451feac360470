"""The parts of ``khuluma serve``'s graceful stop that need no Ray: the supervisor that keeps the service out of
reach of a signal to the command's process group, and how signals become a stop and a hurry. The whole stop, on a
real service, is tests/integration/test_graceful_stop.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from khuluma.cli.serve import StopRequested, StopSignals
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

    from khuluma.cli import serve as serve_cli

    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # e.g. an HAProxy left behind
    monkeypatch.setattr(serve_cli, "_our_processes", lambda: {psutil.Process(left.pid)})
    order: list[str] = []
    cleanups = [
        serve_cli.Cleanup("storage", lambda: order.append("storage")),
        serve_cli.Cleanup("ray", lambda: order.append("ray")),
        serve_cli.Cleanup("slow", lambda: time.sleep(30), limit_s=0.5),
        serve_cli.Cleanup("serve", lambda: order.append("serve"), graceful=True),
    ]
    signals = StopSignals()
    signals.hurrying = True  # a second signal: no graceful Serve shutdown
    started = time.monotonic()
    serve_cli._stop_everything(cleanups, signals)
    assert order == ["ray", "storage"] and cleanups == []  # in reverse order of starting, the slow one given up on
    assert time.monotonic() - started < 10
    left.wait(10)  # stopped, not left behind (the stop reaped it: its status is no longer ours to read)
    assert not psutil.pid_exists(left.pid) or psutil.Process(left.pid).status() == psutil.STATUS_ZOMBIE


def test_the_stop_actor_tells_every_replica_and_knows_when_they_are_done() -> None:
    """The actor's logic (``cluster/graceful_stop.py``), as a plain object: waiting replicas hear the grace period at
    once; the stop waits until each has reported."""
    import asyncio

    from cluster.graceful_stop import GracefulStop

    async def go() -> None:
        actor = GracefulStop()
        await actor.register("a")
        await actor.register("b")
        waiting = [asyncio.ensure_future(actor.wait_for_drain()) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert not any(w.done() for w in waiting) and not await actor.drained()
        assert await actor.drain(12.5) == 2
        assert await asyncio.gather(*waiting) == [12.5, 12.5]
        await actor.done("a")
        assert not await actor.drained()
        await actor.done("b")
        assert await actor.drained()

    asyncio.run(go())


def test_a_replica_is_looked_up_where_serve_created_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Serve replica's actor lives in Serve's namespace while its runtime context names the job's. Looked up
    under the job's, every replica seemed gone as soon as the stop began, and ``khuluma serve`` stopped Serve and
    its HAProxy with the requests and live sessions still in flight (issue #30). Only a definite "no such actor"
    counts a replica as gone; one that cannot be found when it registers is never presumed gone."""
    import asyncio

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

    async def go() -> None:
        actor = graceful_stop.GracefulStop()
        await actor.register("a", own)
        await actor.drain(30)
        assert not await actor.drained()  # alive, and not done: the stop waits
        actors.clear()  # Serve replaced it: it never reports
        assert await actor.drained()

    asyncio.run(go())
    assert graceful_stop.own_actor() is None  # found nowhere: registered without an actor, never presumed gone

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

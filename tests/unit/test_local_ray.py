"""Stopping a node of ``scripts/bench/_local_ray.LocalCluster`` stops everything it started, including a process that
left the node's process group for a session of its own (as Serve's HAProxy manager starts HAProxy)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from scripts.bench._local_ray import RayNode


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited, only its parent has not reaped it


@pytest.mark.parametrize("stop", ["stop", "kill"])
def test_stopping_a_node_stops_a_child_that_started_its_own_session(tmp_path: Path, stop: str) -> None:
    escaped_pid, stubborn_pid = tmp_path / "escaped.pid", tmp_path / "stubborn.pid"
    # the node's process: a child in the node's group, and two grandchildren in sessions of their own (setsid), like
    # HAProxy: one ends on SIGTERM, one ignores it and needs the SIGKILL that follows after the node has exited
    script = (
        f"sleep 300 & setsid sh -c 'echo $$ > {escaped_pid}; exec sleep 300' & "
        f"setsid sh -c 'trap \"\" TERM; echo $$ > {stubborn_pid}; while :; do sleep 1; done' & wait"
    )
    node = RayNode(args=[], env={}, log_path=tmp_path / "node.log")
    node.proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while not all(p.exists() and p.read_text().strip() for p in (escaped_pid, stubborn_pid)):
        assert time.monotonic() < deadline, "the node's processes did not start"
        time.sleep(0.05)
    escaped, stubborn = int(escaped_pid.read_text()), int(stubborn_pid.read_text())
    for pid in (escaped, stubborn):
        assert os.getpgid(pid) != os.getpgid(node.proc.pid)  # out of reach of a signal to the node's group
    tree = [process.pid for process in node._descendants()]
    assert {escaped, stubborn} <= set(tree)

    if stop == "kill":
        node.kill()
    else:
        node.stop(grace_s=2)

    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in tree if _alive(pid)]
    for pid in left:  # never leave a stray behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == []

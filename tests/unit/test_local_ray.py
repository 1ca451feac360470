"""Stopping a node of ``cluster/local_ray.LocalCluster`` stops everything it started, including a process that
left the node's process group for a session of its own (as Serve's HAProxy manager starts HAProxy)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cluster.local_ray import RayNode, _descendants


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited, only its parent has not reaped it


@pytest.mark.parametrize("stop", ["stop", "kill"])
def test_stopping_a_node_stops_a_child_that_started_its_own_session(tmp_path: Path, stop: str) -> None:
    escaped_pid = tmp_path / "escaped.pid"
    # the node's process: a child in the node's group, and a grandchild in a new session (setsid), like HAProxy
    script = f"sleep 300 & setsid sh -c 'echo $$ > {escaped_pid}; exec sleep 300' & wait"
    node = RayNode(args=[], env={}, log_path=tmp_path / "node.log")
    node.proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while not (escaped_pid.exists() and escaped_pid.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    escaped = int(escaped_pid.read_text())
    assert os.getpgid(escaped) != os.getpgid(node.proc.pid)  # out of reach of a signal to the node's group
    tree = _descendants(node.proc.pid)
    assert escaped in tree and len(tree) >= 2

    getattr(node, stop)() if stop == "kill" else node.stop(grace_s=2)

    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in tree if _alive(pid)]
    for pid in left:  # never leave a stray behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == []

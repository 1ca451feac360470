"""``runtime/processes.py``: the processes a command started are found by parent and by session, an orphan in a
session of its own included, and nothing of the caller's session beyond them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from runtime.processes import alive, pss_mb, started_processes, terminate

# A command that starts a child in a session of its own, which starts a grandchild and exits: the grandchild is an
# orphan that only its session ties to the command. Each writes its pid to the file named by argv[1].
COMMAND = """
import os, subprocess, sys, time
pids = open(sys.argv[1], "a")
pids.write(f"{os.getpid()}\\n"); pids.flush()
if len(sys.argv) < 3:  # the command: a child in a session of its own, then wait
    subprocess.Popen([sys.executable, __file__, sys.argv[1], "leader"], start_new_session=True)
    time.sleep(60)
elif sys.argv[2] == "leader":  # the session's leader: a grandchild, then exit
    subprocess.Popen([sys.executable, __file__, sys.argv[1], "orphan"])
else:
    time.sleep(60)
"""


def _pids(path: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = [int(line) for line in path.read_text().split()] if path.exists() else []
        if len(pids) == count:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"expected {count} processes, got {path.read_text() if path.exists() else ''}")


def test_a_commands_processes_are_found_by_parent_and_by_session(tmp_path: Path) -> None:
    script, pid_file = tmp_path / "tree.py", tmp_path / "pids"
    script.write_text(COMMAND)
    command = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    try:
        root, leader, orphan = _pids(pid_file, 3)
        assert root == command.pid
        deadline = time.monotonic() + 30
        while psutil.pid_exists(leader) and alive(psutil.Process(leader)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert orphan not in {p.pid for p in psutil.Process(root).children(recursive=True)}  # the tree lost it
        found = {p.pid for p in started_processes(root)}
        assert orphan in found and root in found  # its session still ties it to the command
        assert os.getpid() not in found  # the caller's session is not the command's
        assert {p.pid for p in started_processes(root, include_root=False)} == found - {root}
        assert pss_mb(started_processes(root)) > 1
        terminate(started_processes(root), grace_s=5)
        assert not psutil.pid_exists(orphan) or not alive(psutil.Process(orphan))
    finally:
        command.kill()
        command.wait(10)
    assert started_processes(command.pid) == set()  # gone: nothing

"""The processes a command started, found by parent and by session, and their memory.

``khuluma serve`` stops whatever of them its clean-ups left; the graceful-stop test checks that none is left; the
benchmarks add up their memory. A process started in a session of its own (the serving process after
``khuluma/cli/supervise.py``'s split, SeaweedFS, the HAProxy that Serve starts) keeps its session after its parent
exits, so it is found through the session; the parent-child tree alone loses it then.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

MB = 1024 * 1024


def started_processes(pid: int, *, include_root: bool = True) -> set[psutil.Process]:
    """``pid``, every process below it, and every process (with those below it) of a session that one of them
    leads. Empty when ``pid`` is gone. ``include_root``: ``pid`` itself too."""
    try:
        root = psutil.Process(pid)
        found = {root, *root.children(recursive=True)}
    except psutil.Error:
        return set()
    sessions = set()
    for process in found:
        try:
            if os.getsid(process.pid) == process.pid:
                sessions.add(process.pid)
        except (ProcessLookupError, PermissionError):
            continue
    if sessions:
        for process in psutil.process_iter():
            try:
                if os.getsid(process.pid) in sessions:
                    found.add(process)
                    found.update(process.children(recursive=True))
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
    if not include_root:
        found.discard(root)
    return found


def alive(process: psutil.Process) -> bool:
    """Running, and not a zombie waiting for its parent."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pss_mb(processes: Iterable[psutil.Process]) -> float:
    """The processes' proportional set size together, in MiB (a shared page counted once across them); a process
    that ended or cannot be read counts nothing."""
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total / MB


def terminate(processes: Iterable[psutil.Process], grace_s: float = 5.0) -> None:
    """SIGTERM each process, then SIGKILL those still running after ``grace_s``."""
    processes = list(processes)
    for process in processes:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(processes, timeout=grace_s)
    for process in left:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=grace_s)

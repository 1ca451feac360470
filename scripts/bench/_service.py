"""``khuluma serve`` as the benchmarks start it, stop it and count its memory.

:func:`start_service` runs the command on free ports (HTTP and metrics) with its own data directory and a token of
its own; :func:`stop_service` stops it gracefully. The memory figures count the processes of
:func:`memory_processes`; ``runtime.processes.started_processes`` and ``pss_mb`` count every process the command
started, storage and proxy included.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import psutil

from runtime.ports import free_port
from runtime.processes import started_processes
from scripts.bench._plain import wait_healthy

# Ray's processes by command line: its workers and actors (replicas among them), raylet, GCS and the dashboard
RAY_PROCESSES = ("ray::", "raylet", "gcs_server", "dashboard")


def start_service(
    work: Path, customer: str, timeout_s: float = 900, options: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], str, str]:
    """``khuluma serve`` (with ``options``) with its data under ``work/data``, its output in ``work/serve.log``, in a
    process group of its own; returns the command, its URL and a token of ``customer`` once it answers."""
    env = {**os.environ, "KHULUMA_DATA_DIR": str(work / "data"), "RAY_AUTH_MODE": "disabled"}
    khuluma = str(Path(sys.executable).with_name("khuluma"))
    created = subprocess.run(
        [khuluma, "token", "create", "--customer", customer, "-q"], env=env, capture_output=True, text=True
    )
    created.check_returncode()
    port = free_port()
    proc = subprocess.Popen(
        [khuluma, "serve", "--port", str(port), "--metrics-port", str(free_port()), *options],
        env=env,
        stdout=(work / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, timeout=timeout_s)
    return proc, url, created.stdout.strip()


def stop_service(proc: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    """A graceful stop (SIGTERM: the command stops Ray and its storage itself), then SIGKILL to its group."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def memory_processes(pid: int | None) -> list[psutil.Process]:
    """The processes that the idle-memory and soak figures count: of those the command ``pid`` started, the
    command (the supervisor, ``khuluma/cli/supervise.py``), its serving process and Ray's processes
    (:data:`RAY_PROCESSES`); not SeaweedFS, HAProxy, nor Ray's helper scripts (log monitor, autoscaler monitor).
    Without ``pid`` (a service started elsewhere): Ray's processes on this machine."""
    if pid is None:
        candidates = list(psutil.process_iter())
        own: set[int] = set()
    else:
        candidates = sorted(started_processes(pid), key=lambda p: p.pid)
        own = {pid}
        try:
            own.update(c.pid for c in psutil.Process(pid).children() if "serve" in " ".join(c.cmdline()))
        except psutil.Error:
            pass
    found = []
    for process in candidates:
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if process.pid in own or any(name in command for name in RAY_PROCESSES):
            found.append(process)
    return found


def ray_processes_below(pid: int, also: tuple[str, ...] = ()) -> list[psutil.Process]:
    """Ray's processes (:data:`RAY_PROCESSES`, and any whose command names one of ``also``) that ``pid`` started, not
    ``pid`` itself; one that ended is left out."""
    found = []
    for process in started_processes(pid, include_root=False):
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if any(name in command for name in (*RAY_PROCESSES, *also)):
            found.append(process)
    return found


def label(process: psutil.Process, driver: int) -> str:
    """The kind of a counted process: the command ``driver`` (the supervisor) and its serving process, a replica by
    its deployment, Ray's daemons by name (the dashboard's head, modules and fork server as one), an actor by its
    class."""
    if process.pid == driver:
        return "khuluma serve (supervisor)"  # the command's pid: forwards signals (khuluma/cli/supervise.py)
    cmd = " ".join(process.cmdline())
    if "khuluma serve" in cmd or "khuluma.cli serve" in cmd:
        return "khuluma serve (driver)"
    replica = re.search(r"ServeReplica:[^:]+:(\w+)", cmd)
    if replica:
        return f"replica {replica.group(1)}"
    for name in ("raylet", "gcs_server", "dashboard_agent", "dashboard", "log_monitor", "ServeController"):
        if name in cmd:
            return name
    actor = re.search(r"ray::(\w+)", cmd)
    return actor.group(1) if actor else process.name()


def pss_by_kind(processes: Iterable[psutil.Process], driver: int) -> dict[str, tuple[int, float]]:
    """The processes of each kind (:func:`label`) and their PSS together, in MiB; one that ended is left out."""
    rows: dict[str, list[float]] = defaultdict(list)
    for process in processes:
        try:
            rows[label(process, driver)].append(process.memory_full_info().pss / (1024 * 1024))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return {name: (len(values), sum(values)) for name, values in rows.items()}

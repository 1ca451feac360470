"""A multi-node Ray cluster on one machine, for the two-node test and the batch benchmark.

Each node is one ``ray start --block`` in its own process group, so stopping it kills exactly the processes it
started (``ray stop`` would kill every Ray process on the machine, other services and test runs included).

A worker node can get a **private disk**: run as root, it starts inside ``unshare --mount`` with fresh tmpfs
mounts over ``/tmp`` and the given directories (e.g. the service's data directory). Nothing the head writes there
is visible to it and nothing it writes there is visible to the head, which is how a real cluster (VMs, pods)
behaves and what proves that no code path hands a local file path to another node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psutil

from runtime.ports import free_port

RAY = Path(sys.executable).with_name("ray")
T = TypeVar("T")


def private_disk_available() -> bool:
    """Whether worker nodes can get a private tmpfs (root, and ``unshare`` present)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


# The code and interpreter this node runs: they stay visible when they live under /tmp (a clone there).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
STAGING = "/mnt"  # a private tmpfs is mounted here first, inside the node's own mount namespace only


def _private_mounts(private_dirs: Sequence[Path]) -> list[str]:
    """Shell steps, run inside ``unshare --mount``: fresh tmpfs over /tmp and ``private_dirs``, with the project
    and the virtualenv bound back in when they live under /tmp (staged through a private tmpfs on /mnt)."""
    q = shlex.quote
    under_tmp = {p for p in (PROJECT_ROOT, Path(sys.prefix).resolve()) if Path("/tmp") in p.parents}
    keep = sorted(str(p) for p in under_tmp if not any(other in p.parents for other in under_tmp))
    steps: list[str] = []
    if keep:
        steps.append(f"mount -t tmpfs tmpfs {STAGING}")
        steps += [f"mkdir -p {STAGING}/k{i} && mount --bind {q(d)} {STAGING}/k{i}" for i, d in enumerate(keep)]
    steps.append("mount -t tmpfs tmpfs /tmp")
    steps += [f"mkdir -p {q(d)} && mount --bind {STAGING}/k{i} {q(d)}" for i, d in enumerate(keep)]
    steps += [f"mkdir -p {q(str(d))} && mount -t tmpfs tmpfs {q(str(d))}" for d in private_dirs]
    return steps


@dataclass
class RayNode:
    """One ``ray start --block`` process group that this process owns."""

    args: list[str]
    env: dict[str, str]
    log_path: Path
    private_dirs: Sequence[Path] = ()
    metrics_port: int | None = None  # where this node's Ray metrics agent serves Prometheus text
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> RayNode:
        command = [str(RAY), "start", "--block", *self.args]
        if self.private_dirs:
            mounts = " && ".join(_private_mounts(self.private_dirs))
            command = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"{mounts} && exec {shlex.join(command)}",
            ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Stop the node at once, as a crash would: SIGKILL to its whole process group."""
        self._signal(signal.SIGKILL, self._descendants())

    def stop(self, grace_s: float = 20) -> None:
        """Stop the node (SIGTERM, then SIGKILL after ``grace_s``), and everything it started."""
        # Serve's HAProxy manager starts HAProxy in a session of its own, which a signal to the node's process group
        # misses (every stopped head used to leave an HAProxy behind, holding its ports). The processes below the
        # node are listed once, while the node still runs: after it exits they belong to init
        started = self._descendants()
        self._signal(signal.SIGTERM, started)
        if self.proc is not None:
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._signal(signal.SIGKILL, started)

    def _descendants(self) -> list[psutil.Process]:
        """Every live process below the node, whatever its process group or session."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            return list(psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            return []

    def _signal(self, sig: signal.Signals, started: list[psutil.Process]) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        for process in started:
            # psutil refuses a process whose id now names another one (it compares start times)
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)
        if sig == signal.SIGKILL:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


@dataclass
class LocalCluster:
    """A head node and any number of worker nodes on this machine, on free ports."""

    temp_dir: Path
    env: Mapping[str, str]
    head_cpus: int = 1
    dashboard: bool = True
    log_dir: Path | None = None  # where each node's `ray start` output goes (default: beside temp_dir)
    gcs_port: int = field(default_factory=free_port)
    dashboard_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    head: RayNode | None = field(default=None, init=False)
    workers: list[RayNode] = field(default_factory=list, init=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _logs(self) -> Path:
        return self.log_dir or self.temp_dir.parent

    def _ports(self) -> list[str]:
        return [
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            # each worker binds a port the OS chooses (Ray's "random ports"): in the kernel's ephemeral range, apart
            # from the ports runtime/ports.py hands out, and never one another node's worker holds
            "--min-worker-port=0",
            "--max-worker-port=0",
        ]

    def start_head(self, resources: Mapping[str, float] | None = None) -> RayNode:
        args = [
            "--head",
            f"--port={self.gcs_port}",
            f"--num-cpus={self.head_cpus}",
            f"--temp-dir={self.temp_dir}",
            f"--ray-client-server-port={free_port()}",
            f"--metrics-export-port={self.metrics_port}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            *self._ports(),
        ]
        if self.dashboard:
            args += [
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
            ]
        else:
            args.append("--include-dashboard=false")
        if resources:
            args.append(f"--resources={json.dumps(dict(resources))}")
        self.head = RayNode(args, dict(self.env), self._logs() / "head.log", (), self.metrics_port).start()
        return self.head

    def start_worker(
        self, num_cpus: int, resources: Mapping[str, float] | None = None, private_dirs: Sequence[Path] = ()
    ) -> RayNode:
        metrics_port = free_port()
        args = [
            f"--address={self.address}",
            f"--num-cpus={num_cpus}",
            f"--metrics-export-port={metrics_port}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            *self._ports(),
        ]
        if resources:
            args.append(f"--resources={json.dumps(dict(resources))}")
        log = self._logs() / f"worker-{len(self.workers)}.log"
        node = RayNode(args, dict(self.env), log, private_dirs, metrics_port).start()
        self.workers.append(node)
        return node

    def restart(self, node: RayNode) -> RayNode:
        """Start a stopped worker again with the same arguments (a node coming back after a crash)."""
        return node.start()

    def stop(self) -> None:
        for node in [*self.workers, *([self.head] if self.head else [])]:
            node.stop()


def wait_for(condition: Callable[[], T | None], timeout_s: float, what: str, every_s: float = 0.5) -> T:
    """Poll ``condition`` until it returns something truthy; its value, or TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a node or service still starting
            last_error = exc
        time.sleep(every_s)
    raise TimeoutError(
        f"timed out after {timeout_s:g}s waiting for {what}" + (f" ({last_error})" if last_error else "")
    )

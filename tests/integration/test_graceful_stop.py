"""A graceful stop of ``khuluma serve`` (issue #30), on a real service: its own data directory, free ports, its own
local Ray, SeaweedFS and HAProxy.

Each case starts the service, opens a live session and starts a slow transcription, then signals the command:

- ``pid``: SIGTERM to the command's pid;
- ``group``: SIGTERM to its whole process group (what a terminal's Ctrl-C or ``kill -TERM -<pgid>`` does);
- ``hurry``: two SIGTERMs in a row (the second skips the waiting).

and checks that, for the first two, the work in flight is let finish through HAProxy: the transcription answers
200 with its transcript and the live session gets its ``final`` (its warning says why) and the close code 1001 with
a reason, while a new request meanwhile is refused (503 with ``Retry-After``, or a refused connection once HAProxy
has closed its listener); and, for all three, that the command exits 0 and no process it started is left: the Ray
processes, SeaweedFS (``weed mini``, in a session of its own) and HAProxy (started by Serve in a session of its
own), found from the command's pid and the service's session while they ran.

The command runs as ``python -m khuluma.cli`` from the repository root: the ``khuluma`` script's command, on this
checkout's code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from khuluma.cli.serve import cluster_ports
from runtime.ports import free_port
from runtime.processes import alive, started_processes
from scripts.bench._plain import wait_healthy
from tests.speechdata import espeak

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
# the command as `python -m khuluma.cli`, run from the repository root: the same command as the `khuluma` script, on
# this checkout's code (the root is the first entry of sys.path, and Ray's workers get the driver's directory too)
KHULUMA = [sys.executable, "-m", "khuluma.cli"]
GRACE_S = 90
# about a minute of speech: several seconds of decoding on 2 cores, so the request is surely in flight at the signal
LONG_TEXT = " ".join(
    [
        "The train to Pretoria leaves from platform number four at half past seven every weekday morning.",
        "Passengers are asked to keep their tickets with them until they leave the station at the other end.",
        "In winter the Drakensberg gets snow, and the roads over the passes are sometimes closed for a day.",
    ]
    * 3
)


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    log: Path
    started: set[psutil.Process] = field(default_factory=set)

    @property
    def headers(self) -> dict[str, str]:
        return {"X-CLIENT-TOKEN": self.token}

    def processes(self) -> set[psutil.Process]:
        """Every process below the command and of the sessions they lead (the service's own, weed's, HAProxy's),
        now."""
        return started_processes(self.proc.pid, include_root=False)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _start(tmp_path: Path) -> Service:
    env = {
        # not the session's Ray Serve ports (its HAProxy's, its replicas'): this service is a cluster of its own
        **{k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")},
        **cluster_ports(),
        "KHULUMA_DATA_DIR": str(tmp_path / "data"),
        "KHULUMA_SHUTDOWN_GRACE_SECONDS": str(GRACE_S),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    token = subprocess.run(
        [*KHULUMA, "token", "create", "--customer", "stop", "-q"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    port = free_port()
    log = tmp_path / "serve.log"
    command = [*KHULUMA, "serve", "--port", str(port), "--num-cpus", "2", "--no-dashboard"]
    proc = subprocess.Popen(
        [*command, "--metrics-port", str(free_port())],
        env=env,
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group, so that signalling "the whole group" reaches nothing of pytest's
    )
    service = Service(proc, f"http://127.0.0.1:{port}", token, log)
    try:
        _wait_up(service)
    except Exception:
        _kill(service)
        raise
    return service


def _wait_up(service: Service, timeout: float = 900) -> None:
    """Until the service answers healthy; fails at once when ``khuluma serve`` exits (a failed start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            raise AssertionError(
                f"khuluma serve exited ({service.proc.returncode}):\n{service.log.read_text()[-3000:]}"
            )
        try:
            wait_healthy(service.url, timeout=5)
            return
        except RuntimeError:
            continue
    raise AssertionError(f"khuluma serve did not come up in {timeout:g} s:\n{service.log.read_text()[-3000:]}")


def _assert_refuses_new_requests(service: Service) -> None:
    """A new request during the stop is not taken: a 503 with Retry-After saying why, while the ingress still
    listens, or a refused connection once HAProxy has closed its listener (both happen, depending on how far the
    stop has got)."""
    try:
        refused = httpx.get(f"{service.url}/api/v1/models", timeout=30)
    except httpx.ConnectError:
        return
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1, refused.text
    assert "shutting down" in refused.json()["detail"]


def _assert_finished_in_flight(service: Service, slow: Slow, live: Live) -> None:
    """The work in flight at the signal was let finish: the transcription answered 200 with its transcript, and
    the live session got its ``final`` (its warnings say why) and the close code 1001 with a reason."""
    tail = service.output()[-4000:]
    assert not slow.is_alive() and slow.error is None, f"transcription: {slow.error!r}\n{tail}"
    assert slow.status == 200, f"transcription: {slow.status} {slow.body}\n{tail}"
    assert slow.body["transcription_status"] == "COMPLETED", slow.body
    assert "Pretoria" in slow.body["transcription_text"], slow.body["transcription_text"]
    assert not live.is_alive() and live.error is None, f"live session: {live.error!r}\n{tail}"
    kinds = [message.get("type") for message in live.messages]
    assert kinds[0] == "ready" and kinds[-1] == "final", f"live session: {live.messages}\n{tail}"
    assert any("shutting down" in warning for warning in live.messages[-1]["warnings"]), live.messages[-1]
    assert live.close_code == 1001 and "shutting down" in live.close_reason, (live.close_code, live.close_reason)


def _kill(service: Service) -> None:
    """Only for a failed test: every process the service started, at once."""
    for process in service.processes() | service.started:
        try:
            process.kill()
        except psutil.Error:
            pass
    service.proc.kill()
    service.proc.wait(30)


class Slow(threading.Thread):
    """A transcription of about a minute of speech, in flight while the service is told to stop."""

    def __init__(self, service: Service, audio: Path) -> None:
        super().__init__(daemon=True)
        self.service, self.audio = service, audio
        self.status: int | None = None
        self.body: dict[str, Any] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.audio.open("rb") as f:
                answer = httpx.post(
                    f"{self.service.url}/api/v2alpha/transcribe/sync/file?lang_code=eng",
                    headers=self.service.headers,
                    files={"file": ("long.wav", f, "audio/wav")},
                    timeout=GRACE_S + 60,
                )
            self.status, self.body = answer.status_code, answer.json()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


class Live(threading.Thread):
    """A live session that sends a little audio and then waits: it must be told the server is going away."""

    def __init__(self, service: Service) -> None:
        super().__init__(daemon=True)
        self.service = service
        self.ready = threading.Event()
        self.messages: list[dict[str, Any]] = []
        self.close_code: int | None = None
        self.close_reason = ""
        self.error: BaseException | None = None

    def run(self) -> None:
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        url = self.service.url.replace("http://", "ws://") + "/ws/stream-transcribe?lang_code=eng"
        try:
            with connect(url, additional_headers=self.service.headers, open_timeout=60, close_timeout=10) as ws:
                self.messages.append(json.loads(ws.recv(timeout=60)))
                ws.send(b"\x00" * 32_000)  # 1 s of silence, then nothing: the session stays open
                self.ready.set()
                try:
                    while True:
                        self.messages.append(json.loads(ws.recv(timeout=GRACE_S + 60)))
                except ConnectionClosed as closed:
                    if closed.rcvd is not None:
                        self.close_code, self.close_reason = closed.rcvd.code, closed.rcvd.reason
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.ready.set()


@pytest.fixture(scope="module")
def long_audio(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return espeak(LONG_TEXT, tmp_path_factory.mktemp("stop-audio") / "long.wav")


@pytest.mark.parametrize("how", ["pid", "group", "hurry"])
def test_khuluma_serve_stops_gracefully(tmp_path: Path, long_audio: Path, how: str) -> None:
    service = _start(tmp_path)
    try:
        live = Live(service)
        live.start()
        assert live.ready.wait(120) and live.error is None, live.error
        slow = Slow(service, long_audio)
        slow.start()
        time.sleep(1.0)  # the upload is in and the transcription runs
        assert slow.is_alive(), f"the transcription was not slow enough to be in flight: {slow.status}"
        service.started = service.processes()  # while everything runs: HAProxy, weed and Ray's processes included
        names = " ".join(" ".join(p.cmdline()) for p in service.started if alive(p))
        assert "raylet" in names and "weed" in names, names
        worker_groups = {os.getpgid(p.pid) for p in service.started if alive(p)}
        assert os.getpgid(service.proc.pid) not in worker_groups  # nothing it started shares the command's group

        if how == "group":
            os.killpg(service.proc.pid, signal.SIGTERM)
        else:
            service.proc.send_signal(signal.SIGTERM)
        if how == "hurry":
            time.sleep(1.0)
            service.proc.send_signal(signal.SIGTERM)
        else:
            time.sleep(1.5)  # the replicas have begun to drain
            _assert_refuses_new_requests(service)

        code = service.proc.wait(GRACE_S + 180)
        assert code == 0, service.output()[-4000:]
        slow.join(60)
        live.join(60)
        if how != "hurry":  # a hurry cuts what is in flight: only that it stops, and cleanly, is checked then
            _assert_finished_in_flight(service, slow, live)
        deadline = time.monotonic() + 15
        left = [p for p in service.started if alive(p)]
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = [p for p in left if alive(p)]
        assert not left, [" ".join(p.cmdline()) for p in left]
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{service.url}/api/v1/health", timeout=5)
        output = service.output()
        assert "Stopped." in output
        if how != "hurry":  # Serve was reached and stopped its replicas itself (their destructors ran), in time
            assert "Nothing to shut down" not in output and "cleanup: Serve" not in output, output[-4000:]
    finally:
        if service.proc.poll() is None:
            _kill(service)

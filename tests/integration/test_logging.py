"""Logs of the real Serve application: a 500's request id is found in Ray's log files, on a JSON line with the
traceback, and on the driver's console (what `khuluma serve` prints)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration


def _log_lines_with(logs_dir: Path, needle: str) -> list[dict]:
    found = []
    for path in logs_dir.rglob("*"):
        if not path.is_file() or path.suffix not in (".err", ".out", ".log"):
            continue
        with path.open(errors="replace") as f:
            for line in f:
                if needle in line:
                    start = line.find("{")
                    try:
                        found.append(json.loads(line[start:]))
                    except ValueError:
                        found.append({"raw": line})
    return found


def test_a_500s_request_id_is_in_the_logs(serve_url: str, settings, make_token, capfd) -> None:
    import ray

    token = make_token("logs-500")  # a token the service has never verified: the next request reads the database
    sqlite_path = settings.db_url.removeprefix("sqlite:///")
    con = sqlite3.connect(sqlite_path)
    con.execute("ALTER TABLE api_tokens RENAME TO api_tokens_away")  # the database breaks under the service
    con.commit()
    try:
        r = httpx.post(
            f"{serve_url}/api/v1/language/detect", headers={"X-CLIENT-TOKEN": token}, json={"text": "Sawubona"}
        )
    finally:
        con.execute("ALTER TABLE api_tokens_away RENAME TO api_tokens")
        con.commit()
        con.close()
    assert r.status_code == 500, r.text
    request_id = r.headers["x-request-id"]
    assert request_id in r.json()["detail"] and "Traceback" not in r.text

    logs_dir = Path(ray._private.worker._global_node.get_logs_dir_path())
    deadline, lines = time.monotonic() + 30, []
    while time.monotonic() < deadline:
        lines = [line for line in _log_lines_with(logs_dir, request_id) if line.get("level") == "ERROR"]
        if lines:
            break
        time.sleep(0.5)
    assert lines, f"request id {request_id} in no log file under {logs_dir}"
    line = lines[0]
    assert line["request_id"] == request_id and line["component"] == "Ingress"
    assert "no such table: api_tokens" in line["exception"] and "Traceback" in line["exception"]

    # the driver's console shows it too (Ray forwards the replicas' standard error to it)
    deadline, console = time.monotonic() + 30, ""
    while time.monotonic() < deadline and request_id not in console:
        console += capfd.readouterr().err
        time.sleep(0.5)
    assert request_id in console


def test_a_clients_request_id_is_kept(serve_url: str, make_token) -> None:
    mine = "trace-me-0001"
    r = httpx.get(f"{serve_url}/api/v1/health", headers={"X-Request-ID": mine})
    assert r.headers["x-request-id"] == mine

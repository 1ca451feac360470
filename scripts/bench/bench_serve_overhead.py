"""Ray Serve overhead: the same FastAPI ingress behind Ray Serve vs plain uvicorn, in one run.

Measures requests/s and p50/p99 for /api/v1/health (no token) and an authenticated route
(GET /ws/stream-transcribe: token check, no model) with N concurrent clients. Prints the ratio.

    .venv/bin/python scripts/bench/bench_serve_overhead.py [--duration 10] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import load, table  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/api/v1/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up")


PLAIN = """
import sys
sys.path.insert(0, {root!r})
import uvicorn
from serve_app.app import create_app
from serve_app.backends import Backends
from serve_app.context import build_context, set_context
from serve_app.settings import Settings
set_context(build_context(Settings(data_dir={data!r}), Backends()))
uvicorn.run(create_app(), host="127.0.0.1", port={port}, log_level="warning", access_log=False)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()

    data = tempfile.mkdtemp(prefix="khuluma-bench-")
    from serve_app.db.session import Database
    from serve_app.settings import Settings
    from serve_app.tokens import create_token

    settings = Settings(data_dir=data)
    token = create_token(Database(settings.db_url), "bench")[0]
    headers = {"X-CLIENT-TOKEN": token}

    # Ray Serve: the ingress alone (no model deployments), configured as `khuluma serve` does.
    from serve_app.cli.serve import load_serve_config, ray_env

    os.environ.update(ray_env())
    import ray
    from ray import serve

    from deployments.app import build_app

    serve_port = free_port()
    cfg = load_serve_config(ROOT / "configs" / "serve.yaml")
    ray.init(address="local", include_dashboard=False, logging_level="ERROR", runtime_env={"env_vars": ray_env()})
    serve.start(http_options={"host": "127.0.0.1", "port": serve_port}, logging_config=cfg.get("logging_config"))
    serve.run(build_app({"settings": {"data_dir": data}, "capabilities": ["none"],
                         "deployments": cfg["deployments"]}), name="khuluma", route_prefix="/", blocking=False,
              logging_config=cfg.get("logging_config"))
    serve_url = f"http://127.0.0.1:{serve_port}"
    wait_healthy(serve_url)

    plain_port = free_port()
    plain = subprocess.Popen([sys.executable, "-c", PLAIN.format(root=str(ROOT), data=data, port=plain_port)])
    plain_url = f"http://127.0.0.1:{plain_port}"
    try:
        wait_healthy(plain_url)
        rows = []
        for label, path, hdrs in (("health", "/api/v1/health", None), ("auth route", "/ws/stream-transcribe", headers)):
            plain_res = load("GET", plain_url + path, concurrency=args.concurrency, duration=args.duration,
                             headers=hdrs)
            serve_res = load("GET", serve_url + path, concurrency=args.concurrency, duration=args.duration,
                             headers=hdrs)
            rows.append((f"{label}: plain uvicorn", plain_res.row()))
            rows.append((f"{label}: Ray Serve", serve_res.row()))
            rows.append((f"{label}: Serve/plain", {"req/s": f"{serve_res.rps / plain_res.rps:.2f}x",
                                                   "p50 ms": f"{serve_res.pct(50) / plain_res.pct(50):.2f}x",
                                                   "p99 ms": f"{serve_res.pct(99) / plain_res.pct(99):.2f}x",
                                                   "errors": "", "n": ""}))
        print(f"\nconcurrency={args.concurrency} duration={args.duration}s cores={os.cpu_count()}")
        print(table(rows))
    finally:
        plain.terminate()
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()

"""The plain-uvicorn side of the benchmarks: the same ingress and deployment classes in one process, no Ray, with
the environment of a replica (:func:`replica_environment`).

The deployments run under Serve's local testing mode (``khuluma.app.build_local``), wired to the ingress the
way the Serve ingress and the tests' ``client_for`` do it: one ``AppContext`` on ``app.state.context``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from runtime.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def replica_environment() -> dict[str, str]:
    """This process's environment with the thread and allocator settings ``khuluma serve`` gives every replica
    (``OMP_WAIT_POLICY``, ``MALLOC_ARENA_MAX``): a plain-uvicorn service then differs from a Serve one by Ray alone,
    whatever the bench set up before it."""
    from khuluma.cli.serve import threads_and_memory_env

    return {**os.environ, **threads_and_memory_env()}


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


@contextmanager
def plain_server(settings: dict[str, Any], capabilities: Sequence[str] = ()) -> Iterator[str]:
    """Run the ingress under plain uvicorn with these capabilities (fields of ``serve_app.context.Clients``) in its
    process; yields its base URL. ``settings``: fields and sections of ``Settings``, no secrets (the server reads
    those from its environment); the database must be migrated already."""
    with plain_process(settings, capabilities) as (url, _):
        yield url


@contextmanager
def plain_process(settings: dict[str, Any], capabilities: Sequence[str] = ()) -> Iterator[tuple[str, int]]:
    """:func:`plain_server`, yielding its base URL and the server's process id (for a profiler)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scripts.bench._plain",
            json.dumps(settings, default=str),
            ",".join(capabilities),
            str(port),
        ],
        cwd=ROOT,
        env=replica_environment(),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait()


@contextmanager
def ray_server(settings: dict[str, Any], capabilities: Sequence[str]) -> Iterator[str]:
    """The same capabilities through a real Ray Serve application (a local Ray, ``configs/serve.yaml``'s
    deployment options, the throughput-optimised handles); yields its base URL and shuts Ray down after."""
    import os

    from khuluma.cli.serve import load_serve_config, ray_env

    os.environ.update(ray_env())
    import ray
    from ray import serve

    from khuluma.app import build_app

    port = free_port()
    cfg = load_serve_config(ROOT / "configs" / "serve.yaml")
    ray.init(address="local", include_dashboard=False, logging_level="ERROR", runtime_env={"env_vars": ray_env()})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=cfg.get("logging_config"))
        app = build_app({"settings": settings, "capabilities": list(capabilities), "deployments": cfg["deployments"]})
        serve.run(app, name="khuluma", route_prefix="/", blocking=False, logging_config=cfg.get("logging_config"))
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url)
        yield url
    finally:
        serve.shutdown()
        ray.shutdown()


def serve(settings_json: str, capabilities: str, port: int) -> None:
    """The server process of :func:`plain_server`."""
    import uvicorn

    from contracts.settings import Settings
    from khuluma.app import build_local
    from serve_app.app import create_app
    from serve_app.context import Clients, build_context
    from serve_app.in_process import serve_in_process

    settings = Settings.from_bound(json.loads(settings_json))
    wanted = [c for c in capabilities.split(",") if c]
    handles = build_local(settings, wanted) if wanted else {}
    app = create_app(settings)
    clients = Clients.from_handles(settings, **handles)
    serve_in_process(settings, clients)  # as the Serve ingress does
    app.state.context = build_context(settings, clients)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))

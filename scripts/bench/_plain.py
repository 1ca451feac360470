"""The two sides of the benchmarks' service comparisons. The plain-uvicorn side (:func:`plain_server`): the same
ingress and deployment classes in one process, no Ray, with the environment of a replica
(:func:`replica_environment`). The Ray Serve side (:func:`ray_server`, :func:`serve_application`): a local Ray and
Serve set up as ``khuluma serve`` sets them up.

On the plain side the deployments run under Serve's local testing mode (``khuluma.app.build_local``), wired to the
ingress the way the Serve ingress and the tests' ``client_for`` do it: one ``AppContext`` on ``app.state.context``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
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
    arguments = [json.dumps(settings, default=str), ",".join(capabilities)]
    with child_server(lambda port: [sys.executable, "-m", "scripts.bench._plain", *arguments, str(port)]) as served:
        yield served


@contextmanager
def child_server(command: Callable[[int], list[str]], timeout_s: float = 300) -> Iterator[tuple[str, int]]:
    """The HTTP server ``command(port)`` starts, run from the repository root with a replica's environment; yields
    its base URL and process id once its health route answers, and stops it after. A server that exits before it
    answers fails at once."""
    port = free_port()
    child = subprocess.Popen(command(port), cwd=ROOT, env=replica_environment())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while child.poll() is None and time.monotonic() < deadline:
            try:
                wait_healthy(url, timeout=1)
                break
            except RuntimeError:
                continue
        else:
            raise RuntimeError(f"{url} did not come up (exit {child.poll()})")
        yield url, child.pid
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextmanager
def ray_server(settings: dict[str, Any], capabilities: Sequence[str]) -> Iterator[str]:
    """The same capabilities through a real Ray Serve application (a local Ray, ``configs/serve.yaml``'s
    deployment options, the throughput-optimised handles); yields its base URL and shuts Ray down after."""
    from khuluma.app import build_app

    def application(cfg: dict[str, Any]) -> Any:
        return build_app({"settings": settings, "capabilities": list(capabilities), "deployments": cfg["deployments"]})

    with serve_application(application, name="khuluma") as url:
        yield url


@contextmanager
def serve_application(
    application: Callable[[dict[str, Any]], Any], *, name: str, dashboard: bool = False
) -> Iterator[str]:
    """A local Ray and Serve set up as ``khuluma serve`` sets them up (``ray_env``, ``configs/serve.yaml``'s HTTP and
    logging options), running ``application(config)`` (``config``: :func:`khuluma.cli.serve.load_serve_config`'s
    reading of ``configs/serve.yaml``) at ``/``; yields its base URL, then stops Serve and Ray. Unlike ``khuluma
    serve``, the dashboard is off unless ``dashboard``, and Ray logs errors only.

    Ray's processes and HAProxy (which runs in a session of its own) that outlive ``ray.shutdown`` are killed and
    waited for, so a second Ray in the same process gets their ports."""
    from khuluma.cli.serve import load_serve_config, ray_env
    from runtime.processes import started_processes, terminate
    from scripts.bench._service import ray_processes_below

    os.environ.update(ray_env())
    import ray
    from ray import serve

    port = free_port()
    cfg = load_serve_config(ROOT / "configs" / "serve.yaml")
    before = {process.pid for process in started_processes(os.getpid(), include_root=False)}
    try:
        ray.init(
            address="local", include_dashboard=dashboard, logging_level="ERROR", runtime_env={"env_vars": ray_env()}
        )
        try:
            http = {**cfg["http_options"], "host": "127.0.0.1", "port": port}
            serve.start(http_options=http, logging_config=cfg.get("logging_config"))
            app = application(cfg)
            serve.run(app, name=name, route_prefix="/", blocking=False, logging_config=cfg.get("logging_config"))
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url)
            yield url
        finally:
            serve.shutdown()
    finally:
        left = [p for p in ray_processes_below(os.getpid(), also=("haproxy",)) if p.pid not in before]
        ray.shutdown()
        terminate(left)


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

"""Ray Serve's own floor on this machine, with no Khuluma code: what Serve alone costs in Khuluma's layout, configured
as ``khuluma serve`` configures Ray and Serve (``khuluma.cli.serve.ray_env``: HAProxy in front of the ingress replica,
throughput-optimised handles, the replicas' thread and allocator settings; ``configs/serve.yaml``'s HTTP and logging
options, and its options of the Ingress and Search deployments).

- **An empty route**: a FastAPI app whose one route answers a small JSON body, through Serve against the same app
  under plain uvicorn with a replica's environment, ``--concurrency`` closed-loop clients, both timed while Ray runs
  (the goal of the trivial authenticated route: 0.7x).
- **A route over a second replica**: the ingress calls a deployment (Search's options) whose method holds a core for
  each of ``--work-ms`` (a SHA-256 of a buffer in a worker thread, which releases the interpreter lock as e5 does),
  one client at a time, against the same work called in this process: Serve's cost in milliseconds against the
  0.3 x the work that the knowledge-base query's goal (1.3x its in-process models) leaves.
- ``--memory``: then, in a second Ray with the dashboard on, the idle PSS of Ray and Serve with the deployments of
  ``khuluma serve`` (Ingress, Speech, TextAnalysis, Search, Jobs), each empty (the idle-memory goal: 1.5 GiB with the
  models). Ray's idle pool workers, which a service also has at times, are shown and not counted.

Runs after ``./scripts/setup.sh --bench``:

    .venv/bin/python scripts/bench/bench_serve_floor.py [--duration 8] [--concurrency 16] [--work-ms 20 25 30]
        [--memory]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, json_option, load, median, write_json  # noqa: E402
from _plain import child_server, serve_application  # noqa: E402

MIB = 1024 * 1024
EMPTY_DEPLOYMENTS = ("Speech", "TextAnalysis", "Jobs")  # with Ingress and Search: the deployments of khuluma serve
IDLE = "IDLE"  # Ray's idle pool workers (their kind in _service.label), which come and go: not counted


def empty_app() -> Any:
    """The app both sides serve: an empty route, and the health route the bench waits for."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/api/v1/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/empty")
    async def empty() -> dict[str, str]:
        return {"status": "ok"}

    return app


def work_size(work_ms: float) -> int:
    """The size of a buffer whose SHA-256 takes about ``work_ms`` in this process (measured here, so that both sides
    hash the same bytes)."""
    probe = b"x" * (4 * MIB)
    started = time.perf_counter()
    for _ in range(10):
        hashlib.sha256(probe).digest()
    per_byte = (time.perf_counter() - started) / (10 * len(probe))
    return int(work_ms / 1000 / per_byte)


def in_process_ms(size: int, calls: int) -> float:
    buffer = b"x" * size
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        hashlib.sha256(buffer).hexdigest()
        samples.append((time.perf_counter() - started) * 1000)
    return median(samples)


def serve_app(options: dict[str, dict[str, Any]], memory: bool) -> Any:
    """Khuluma's layout with no Khuluma code: an ingress over a working deployment, and for ``memory`` the others
    empty. ``options``: the effective deployment options of ``configs/serve.yaml``."""
    from ray import serve

    app = empty_app()

    class Work:
        def __init__(self) -> None:
            self.buffers: dict[int, bytes] = {}  # made on first use, after the idle memory is read

        async def run(self, size: int) -> str:
            if size not in self.buffers:
                self.buffers[size] = b"x" * size
            buffer = self.buffers[size]
            return (await asyncio.to_thread(hashlib.sha256, buffer)).hexdigest()[:8]

    class Empty:
        def ping(self) -> str:
            return "ok"

    @serve.ingress(app)
    class Ingress:
        def __init__(self, work: Any, *others: Any) -> None:
            self.work = work
            self.others = others

        @app.get("/work/{size}")
        async def work(self, size: int) -> dict[str, str]:
            return {"digest": await self.work.run.remote(size)}

    def deployment(cls: type, name: str) -> Any:
        chosen = {k: v for k, v in options[name].items() if k != "user_config"} if cls is not Empty else {}
        actor = {"num_cpus": (options[name].get("ray_actor_options") or {}).get("num_cpus", 0.25)}
        return serve.deployment(name=name)(cls).options(**{**chosen, "ray_actor_options": actor})

    others = [deployment(Empty, name).bind() for name in EMPTY_DEPLOYMENTS] if memory else []
    return deployment(Ingress, "Ingress").bind(deployment(Work, "Search").bind(), *others)


@contextmanager
def serve_running(*, dashboard: bool, memory: bool) -> Iterator[str]:
    """:func:`serve_app` in a local Ray and Serve set up as ``khuluma serve`` sets them up; yields its URL."""
    from khuluma.app import deployment_options

    def application(cfg: dict[str, Any]) -> Any:
        return serve_app(deployment_options(cfg["deployments"]), memory)

    with serve_application(application, name="floor", dashboard=dashboard) as url:
        yield url


@contextmanager
def plain_running() -> Iterator[str]:
    """The empty app under plain uvicorn in a child process with a replica's environment; yields its URL."""
    with child_server(lambda port: [sys.executable, __file__, "--plain-server", str(port)]) as (url, _):
        yield url


def plain_main(port: int) -> None:
    import uvicorn

    uvicorn.run(empty_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False)


def checked(result: LoadResult, what: str) -> LoadResult:
    if result.errors or not result.requests:
        raise SystemExit(f"{what}: {result.errors} of {result.requests} requests failed")
    return result


def ray_pss() -> dict[str, tuple[int, float]]:
    """The processes of each kind this bench started through Ray (its replicas by deployment) and their PSS in
    MiB."""
    from scripts.bench._service import pss_by_kind, ray_processes_below

    return pss_by_kind(ray_processes_below(os.getpid()), os.getpid())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--work-ms", type=float, nargs="+", default=[20.0, 25.0, 30.0])
    parser.add_argument("--memory", action="store_true", help="also the idle PSS, dashboard on, empty replicas")
    parser.add_argument("--settle", type=float, default=10, help="seconds idle before the memory is read")
    parser.add_argument("--plain-server", type=int, help=argparse.SUPPRESS)
    json_option(parser)
    args = parser.parse_args()
    if args.plain_server:
        plain_main(args.plain_server)
        return

    sizes = {work_ms: work_size(work_ms) for work_ms in args.work_ms}
    work: list[tuple[float, float, float]] = []  # work ms, in-process p50, through Serve p50
    with serve_running(dashboard=False, memory=False) as serve_url, plain_running() as plain_url:
        for url in (plain_url, serve_url):  # unmeasured warm-up, both sides alike
            load("GET", url + "/empty", concurrency=args.concurrency, duration=3)
        plain_empty = checked(
            load("GET", plain_url + "/empty", concurrency=args.concurrency, duration=args.duration), "plain"
        )
        serve_empty = checked(
            load("GET", serve_url + "/empty", concurrency=args.concurrency, duration=args.duration), "Serve"
        )
        for work_ms, size in sizes.items():
            served = checked(load("GET", f"{serve_url}/work/{size}", concurrency=1, duration=args.duration), "work")
            work.append((work_ms, in_process_ms(size, 200), served.pct(50)))
    pss: dict[str, tuple[int, float]] = {}
    if args.memory:
        with serve_running(dashboard=True, memory=True):
            time.sleep(args.settle)
            pss = ray_pss()

    counted = {kind: row for kind, row in pss.items() if kind != IDLE}
    figures: dict[str, Any] = {
        "plain empty req/s": plain_empty.rps,
        "serve empty req/s": serve_empty.rps,
        "work": [{"work ms": w, "in-process p50 ms": bare, "serve p50 ms": served} for w, bare, served in work],
    }
    if counted:
        figures["idle MiB"] = sum(mib for _, mib in counted.values())
        figures["idle processes"] = sum(count for count, _ in counted.values())
    write_json(args.json, figures)

    print(f"\nRay Serve's floor, no Khuluma code ({os.cpu_count()} cores, dashboard off)")
    print(
        f"empty route, {args.concurrency} clients: plain uvicorn {plain_empty.rps:.0f} req/s, Serve "
        f"{serve_empty.rps:.0f} req/s: {serve_empty.rps / plain_empty.rps:.2f}x (the authenticated route's goal: 0.7x)"
    )
    print(
        "\n| work in a second replica, 1 client | in-process p50 ms | through Serve p50 ms | ratio | Serve's ms |",
        end="",
    )
    print(" 0.3x the work |\n|---|---|---|---|---|---|")
    for work_ms, bare, served in work:
        print(
            f"| {work_ms:g} ms | {bare:.1f} | {served:.1f} | {served / bare:.2f}x | {served - bare:.1f} "
            f"| {0.3 * bare:.1f} |"
        )
    if pss:
        print("\nIdle PSS, dashboard on, the replicas empty (processes, MiB; this bench's own process not counted)")
        for kind, (count, mib) in sorted(pss.items(), key=lambda row: -row[1][1]):
            print(f"  {kind:<40} {count:3d} {mib:7.0f}")
        if counted:
            print(
                f"  {'total':<40} {figures['idle processes']:3d} {figures['idle MiB']:7.0f}"
                "  (issue 46's goal, with the driver and the models: 1536)"
            )


if __name__ == "__main__":
    main()

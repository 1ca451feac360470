"""The floor of one Ray Serve handle call here: a replica calls another replica's method that returns its argument,
back to back and with the caller idle a while between calls (as sequential knowledge-base queries leave the
ingress and the Search replica idle while e5 runs), with the environment and handle options of ``khuluma serve``
(``khuluma.cli.serve.ray_env``: gRPC between handles, user code on the replica's event loop).

No model and no Khuluma code in the call: what is left of the knowledge-base query's hop (docs/performance.md,
knowledge-base query) above this floor is the query's own.

Runs after ``./scripts/setup.sh --bench``:

    .venv/bin/python scripts/bench/bench_handle_hop.py [--calls 200] [--gaps-ms 0 20] [--payload 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from khuluma.cli.serve import ray_env  # noqa: E402


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per gap")
    parser.add_argument("--gaps-ms", type=float, nargs="+", default=[0.0, 20.0], help="idle time between calls")
    parser.add_argument("--payload", type=int, default=2000, help="characters sent and returned")
    args = parser.parse_args()

    os.environ.update(ray_env())
    import ray
    from ray import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0.2})
    class Echo:
        async def echo(self, value: str) -> str:
            return value

    @serve.deployment(ray_actor_options={"num_cpus": 0.2})
    class Caller:
        def __init__(self, echo: Any) -> None:
            self.echo = echo

        async def timed(self, calls: int, gap_s: float, payload: int) -> list[float]:
            value = "x" * payload
            await self.echo.echo.remote(value)  # the first call opens the channel
            samples = []
            for _ in range(calls):
                started = time.perf_counter()
                await self.echo.echo.remote(value)
                samples.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(gap_s)
            return samples

    ray.init(address="local", include_dashboard=False, logging_level="ERROR", runtime_env={"env_vars": ray_env()})

    async def measure() -> list[tuple[float, float, float]]:
        # the handle's router lives on this event loop: Serve is shut down on it too
        handle = serve.run(Caller.bind(Echo.bind()), name="handle-hop", route_prefix=None)
        try:
            rows = []
            for gap_ms in args.gaps_ms:
                samples = await handle.timed.remote(args.calls, gap_ms / 1000, args.payload)
                rows.append((gap_ms, *_percentiles(samples)))
            return rows
        finally:
            await serve.shutdown_async()

    try:
        rows = asyncio.run(measure())
    finally:
        ray.shutdown()
    base = rows[0][1]
    print(f"\nOne Serve handle call, replica to replica, {args.payload} characters each way, {args.calls} calls")
    print("| idle between calls | p50 ms | p90 ms | p50 / the first row's |\n|---|---|---|---|")
    for gap_ms, p50, p90 in rows:
        print(f"| {gap_ms:g} ms | {p50:.2f} | {p90:.2f} | {p50 / base:.2f}x |")


if __name__ == "__main__":
    main()

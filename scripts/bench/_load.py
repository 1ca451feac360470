"""A small closed-loop HTTP load generator (aiohttp), shared by the benchmarks."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]

    def row(self) -> dict[str, Any]:
        return {
            "req/s": round(self.rps, 1),
            "p50 ms": round(self.pct(50), 1),
            "p99 ms": round(self.pct(99), 1),
            "errors": self.errors,
            "n": self.requests,
        }


async def _run(
    method: str,
    url: str,
    *,
    concurrency: int,
    duration: float,
    headers: dict[str, str] | None,
    json_body: Any,
    data_factory=None,
    warmup: int = 20,
    expect: tuple[int, ...] = (200,),
) -> LoadResult:
    latencies: list[float] = []
    errors = 0
    conn = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def once() -> bool:
            kwargs: dict[str, Any] = {"headers": headers}
            if data_factory is not None:
                kwargs["data"] = data_factory()
            elif json_body is not None:
                kwargs["json"] = json_body
            async with session.request(method, url, **kwargs) as resp:
                await resp.read()
                return resp.status in expect

        for _ in range(warmup):
            await once()
        stop = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                ok = await once()
                latencies.append((time.perf_counter() - t0) * 1000)
                errors += 0 if ok else 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return LoadResult(len(latencies), errors, elapsed, latencies)


def load(
    method: str,
    url: str,
    *,
    concurrency: int = 16,
    duration: float = 10.0,
    headers: dict[str, str] | None = None,
    json_body: Any = None,
    data_factory=None,
    warmup: int = 20,
    expect: tuple[int, ...] = (200,),
) -> LoadResult:
    return asyncio.run(
        _run(
            method,
            url,
            concurrency=concurrency,
            duration=duration,
            headers=headers,
            json_body=json_body,
            data_factory=data_factory,
            warmup=warmup,
            expect=expect,
        )
    )


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    cols = list(rows[0][1])
    width = max(len(name) for name, _ in rows)
    lines = [f"{'':{width}}  " + "  ".join(f"{c:>9}" for c in cols)]
    for name, r in rows:
        lines.append(f"{name:{width}}  " + "  ".join(f"{r[c]!s:>9}" for c in cols))
    return "\n".join(lines)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def json_option(parser: Any) -> None:
    """``--json PATH``: the bench also writes its figures there (what ``run_all.py`` reads)."""
    parser.add_argument("--json", help="also write the figures as JSON to this file (for run_all.py)")


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        import json
        from pathlib import Path

        Path(path).write_text(json.dumps(payload, indent=1, default=float))

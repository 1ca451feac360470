"""Overload: the service at 4x its measured capacity, route by route (issue #30, bounded queues and load shedding).

For each route (sentiment, knowledge-base query, sync transcription):

1. **capacity**: a closed loop of ``--concurrency`` clients for ``--capacity-seconds``: the route's capacity is the
   rate of 200 answers, and this unloaded run's p50/p99 is the baseline (``--capacity ROUTE=REQ_PER_S`` skips it);
2. **overload**: an open loop for ``--duration`` seconds (2 minutes by default): requests arrive at ``--overload``
   (4) times that capacity, evenly spaced, whether earlier ones were answered or not (at most ``--max-in-flight``
   open at once: an arrival past it is counted as *not sent*, the load generator's own limit);
3. the count of each status, timeouts (no answer within ``--timeout``) and connection errors, the p50/p99 of the
   admitted (200) requests against the capacity run, how fast refusals (429/503) came back, and the health
   route's worst latency and status while it ran (it must stay answerable).

The PSS (proportional set size: shared pages counted once) of the service's processes is measured fresh, at the end,
and around each overload run: warm (after the route's capacity run, its models loaded and used) and 5 s after the
overload (what overload costs in memory, apart from what a first use loads), with psutil as
``scripts/bench/idle_memory.py`` does, but found from the ``khuluma serve`` command down (every process below it and
every process of the sessions they lead: Ray's, the replicas, SeaweedFS, HAProxy) rather than by name, so another
Ray cluster on the machine is not counted (and SeaweedFS and HAProxy are).

    .venv/bin/python scripts/bench/bench_overload.py                    # starts `khuluma serve` itself
    .venv/bin/python scripts/bench/bench_overload.py --duration 20 --capacity-seconds 10 --routes sentiment
    .venv/bin/python scripts/bench/bench_overload.py --url http://127.0.0.1:8000 --token khk_... [--pid PID]

With ``--url`` the service is yours: ``--pid`` (its ``khuluma serve`` pid) lets the bench measure its PSS, without
it PSS is not measured. The token's customer should have no limits (``khuluma token limits``), or its 429s mix
with the service's own load shedding.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, table, write_json  # noqa: E402

MB = 1024 * 1024
SETTLE_S = 5
ROUTES = ("sentiment", "kb-query", "transcribe")
CONCURRENCY = {"sentiment": 16, "kb-query": 8, "transcribe": 8}  # closed-loop clients that reach capacity
KB = "/api/v1/search/knowledgebase"
SENTENCES = [
    "The service was excellent. The staff were rude though! I will come back next week.",
    "Ngijabule kakhulu namuhla. Ukudla bekubi kakhulu.",
    "Die kos was heerlik. Die diens was verskriklik.",
    "Ke thabile haholo kajeno. Kopano e qala ka hora ya borobong.",
]
DOCUMENT = (
    "Minibus taxis carry most commuters in Johannesburg. The Drakensberg gets snow in winter. "
    "Cape Town's winter rains fill the dams. The Kruger Park is home to the big five. "
) * 20
QUERIES = ["snow in winter", "how do commuters travel", "where are the big five", "rain in Cape Town"]


# ------------------------------------------------------------------------------------------------ figures


def pct(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``xs``; NaN when empty."""
    if not xs:
        return float("nan")
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def arrivals(rate: float, duration: float) -> list[float]:
    """Offsets (s) of an open loop's arrivals: ``rate`` per second, evenly spaced, over ``duration``."""
    if rate <= 0 or duration <= 0:
        return []
    step = 1.0 / rate
    return [i * step for i in range(int(duration * rate))]


@dataclass
class Outcomes:
    """What one run of a route got back."""

    seconds: float = 0.0
    offered: int = 0  # requests the load asked for
    not_sent: int = 0  # arrivals past --max-in-flight (the load generator's own limit)
    statuses: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    connection_errors: int = 0
    admitted_ms: list[float] = field(default_factory=list)  # 200s
    refused_ms: list[float] = field(default_factory=list)  # 429 and 503: how fast a refusal comes back
    health: list[tuple[int, float]] = field(default_factory=list)  # (status, ms) of the probes meanwhile

    def add(self, status: int | str, ms: float) -> None:
        if status == "timeout":
            self.timeouts += 1
        elif status == "connection":
            self.connection_errors += 1
        else:
            assert isinstance(status, int)
            self.statuses[status] += 1
            if status == 200:
                self.admitted_ms.append(ms)
            elif status in (429, 503):
                self.refused_ms.append(ms)

    @property
    def admitted_per_s(self) -> float:
        return self.statuses[200] / self.seconds if self.seconds else 0.0

    def row(self) -> dict[str, Any]:
        health_bad = sum(1 for status, _ in self.health if status != 200)
        return {
            "offered/s": round(self.offered / self.seconds, 1) if self.seconds else 0,
            "200/s": round(self.admitted_per_s, 1),
            "p50 ms": round(pct(self.admitted_ms, 50), 1),
            "p99 ms": round(pct(self.admitted_ms, 99), 1),
            "statuses": " ".join(f"{code}:{n}" for code, n in sorted(self.statuses.items())) or "-",
            "refusal p50 ms": round(pct(self.refused_ms, 50), 1),
            "timeouts": self.timeouts,
            "conn errors": self.connection_errors,
            "not sent": self.not_sent,
            "health max ms": round(max((ms for _, ms in self.health), default=float("nan")), 1),
            "health not 200": health_bad,
        }


# ------------------------------------------------------------------------------------------------ requests

Request = Callable[[aiohttp.ClientSession, int], Awaitable[int]]


class Routes:
    """One request function per route (``i`` picks the body), after the knowledge base exists."""

    def __init__(self, url: str, token: str, speech: bytes | None) -> None:
        self.url, self.headers, self.speech = url, {"X-CLIENT-TOKEN": token}, speech
        self.kb_id = ""

    async def setup(self, session: aiohttp.ClientSession, routes: list[str]) -> None:
        if "kb-query" in routes:
            async with session.post(
                f"{self.url}{KB}", headers=self.headers, json={"knowledgebase_name": "overload"}
            ) as r:
                r.raise_for_status()
                self.kb_id = (await r.json())["id"]
            form = aiohttp.FormData()
            form.add_field("file", DOCUMENT.encode(), filename="facts.txt", content_type="text/plain")
            async with session.post(f"{self.url}{KB}/{self.kb_id}/document", headers=self.headers, data=form) as r:
                r.raise_for_status()

    def request(self, route: str) -> Request:
        return {"sentiment": self._sentiment, "kb-query": self._query, "transcribe": self._transcribe}[route]

    async def _sentiment(self, session: aiohttp.ClientSession, i: int) -> int:
        # a number in each text: distinct bodies, as real traffic (no cache answers them)
        body = {"encoded_text": f"{SENTENCES[i % len(SENTENCES)]} Order {i}."}
        url = f"{self.url}/api/v1/sentiment_analysis/process"
        async with session.post(url, headers=self.headers, json=body) as r:
            await r.read()
            return r.status

    async def _query(self, session: aiohttp.ClientSession, i: int) -> int:
        body = {"query": f"{QUERIES[i % len(QUERIES)]} {i}", "top_k": 5}
        async with session.post(f"{self.url}{KB}/{self.kb_id}/query", headers=self.headers, json=body) as r:
            await r.read()
            return r.status

    async def _transcribe(self, session: aiohttp.ClientSession, i: int) -> int:
        assert self.speech is not None
        form = aiohttp.FormData()
        form.add_field("file", self.speech, filename=f"s{i}.wav", content_type="audio/wav")
        url = f"{self.url}/api/v2alpha/transcribe/sync/file?lang_code=eng"
        async with session.post(url, headers=self.headers, data=form) as r:
            await r.read()
            return r.status


async def _timed(send: Request, session: aiohttp.ClientSession, i: int, timeout: float) -> tuple[int | str, float]:
    t0 = time.perf_counter()
    try:
        status: int | str = await asyncio.wait_for(send(session, i), timeout)
    except TimeoutError:
        status = "timeout"
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError):
        status = "connection"
    return status, (time.perf_counter() - t0) * 1000


async def _probe_health(url: str, stop: asyncio.Event, into: list[tuple[int, float]]) -> None:
    """GET /api/v1/health every second while the load runs (its own connection: never behind the load's)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                async with session.get(f"{url}/api/v1/health") as r:
                    await r.read()
                    status = r.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            into.append((status, (time.perf_counter() - t0) * 1000))
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass


async def closed_loop(url: str, send: Request, clients: int, seconds: float, timeout: float) -> Outcomes:
    """``clients`` clients, each sending its next request when the last is answered: the route at capacity."""
    out = Outcomes()
    counter = iter(range(10**9))
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        for _ in range(min(clients, 4)):  # warm-up: models loaded, connections open
            await _timed(send, session, next(counter), timeout)
        stop_at = time.monotonic() + seconds
        start = time.monotonic()
        stop = asyncio.Event()
        health = asyncio.ensure_future(_probe_health(url, stop, out.health))

        async def client() -> None:
            while time.monotonic() < stop_at:
                out.offered += 1
                out.add(*await _timed(send, session, next(counter), timeout))

        await asyncio.gather(*(client() for _ in range(clients)))
        out.seconds = time.monotonic() - start
        stop.set()
        await health
    return out


async def open_loop(
    url: str, send: Request, rate: float, seconds: float, timeout: float, max_in_flight: int
) -> Outcomes:
    """Requests arrive at ``rate`` per second for ``seconds``, answered or not (at most ``max_in_flight`` open)."""
    out = Outcomes()
    connector = aiohttp.TCPConnector(limit=max_in_flight)
    in_flight: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        stop = asyncio.Event()
        health = asyncio.ensure_future(_probe_health(url, stop, out.health))

        async def one(i: int) -> None:
            out.add(*await _timed(send, session, i, timeout))

        start = time.monotonic()
        for i, offset in enumerate(arrivals(rate, seconds)):
            delay = start + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            out.offered += 1
            if len(in_flight) >= max_in_flight:
                out.not_sent += 1
                continue
            task = asyncio.ensure_future(one(i))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        out.seconds = time.monotonic() - start
        if in_flight:  # the last arrivals' answers (each bounded by --timeout)
            await asyncio.gather(*in_flight)
        stop.set()
        await health
    return out


# ------------------------------------------------------------------------------------------------ the service


def service_processes(pid: int) -> list[Any]:
    """``pid`` (the ``khuluma serve`` command), every process below it, and every process of the sessions those
    lead (its service, SeaweedFS and HAProxy each run in a session of their own)."""
    import psutil

    try:
        root = psutil.Process(pid)
        found = {root, *root.children(recursive=True)}
    except psutil.NoSuchProcess:
        return []
    sessions = set()
    for process in found:
        try:
            if os.getsid(process.pid) == process.pid:
                sessions.add(process.pid)
        except (ProcessLookupError, PermissionError):
            continue
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) in sessions:
                found.add(process)
                found.update(process.children(recursive=True))
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return sorted(found, key=lambda p: p.pid)


def pss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    import psutil

    total = 0
    for process in service_processes(pid):
        try:
            total += process.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total / MB


def start_service(work: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """``khuluma serve`` on a free port with its own data directory (as scripts/bench/soak.py does)."""
    from scripts.bench._plain import free_port, wait_healthy

    port = free_port()
    env = {**os.environ, "KHULUMA_DATA_DIR": str(work / "data"), "RAY_AUTH_MODE": "disabled"}
    khuluma = str(Path(sys.executable).with_name("khuluma"))
    created = subprocess.run(
        [khuluma, "token", "create", "--customer", "overload", "-q"], env=env, capture_output=True, text=True
    )
    created.check_returncode()
    proc = subprocess.Popen(
        [khuluma, "serve", "--port", str(port), "--metrics-port", str(free_port())],
        env=env,
        stdout=(work / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, timeout=900)
    return proc, url, created.stdout.strip()


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    """A graceful stop (SIGTERM), then SIGKILL to the group if it does not end."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def speech_sample(work: Path) -> bytes:
    from tests.speechdata import espeak

    return espeak("good morning, the weather today is sunny and warm", work / "speech.wav").read_bytes()


# ------------------------------------------------------------------------------------------------ main


def parse_capacity(values: list[str]) -> dict[str, float]:
    """``ROUTE=REQ_PER_S`` pairs (``--capacity``)."""
    out: dict[str, float] = {}
    for value in values:
        route, _, rate = value.partition("=")
        if route not in ROUTES or not rate:
            raise ValueError(f"--capacity {value!r}: expected ROUTE=REQ_PER_S with ROUTE one of {', '.join(ROUTES)}")
        out[route] = float(rate)
    return out


async def run_route(
    routes: Routes, route: str, args: argparse.Namespace, known: dict[str, float], pss: Callable[[], float | None]
) -> tuple[dict[str, Outcomes], tuple[float | None, float | None]]:
    """The route's capacity run and its overload run, and the service's PSS just before the overload (warm: the
    route's models loaded and used at capacity) and after it (once what it left behind settled)."""
    send = routes.request(route)
    clients = args.concurrency or CONCURRENCY[route]
    runs: dict[str, Outcomes] = {}
    if route in known:
        capacity = known[route]
    else:
        print(f"{route}: measuring capacity ({clients} clients, {args.capacity_seconds:g} s) ...", flush=True)
        runs["capacity"] = await closed_loop(routes.url, send, clients, args.capacity_seconds, args.timeout)
        capacity = runs["capacity"].admitted_per_s
        if refused := len(runs["capacity"].refused_ms):
            print(f"{route}: {refused} refusals at capacity already: fewer --concurrency clients measure it unloaded")
    if capacity <= 0:
        raise RuntimeError(f"{route}: no request succeeded at capacity; is the route served?")
    rate = args.overload * capacity
    before = pss()
    print(f"{route}: {rate:.1f} req/s ({args.overload:g}x {capacity:.1f}) for {args.duration:g} s ...", flush=True)
    runs[f"{args.overload:g}x capacity"] = await open_loop(
        routes.url, send, rate, args.duration, args.timeout, args.max_in_flight
    )
    await asyncio.sleep(SETTLE_S)  # what the load left behind settles (queues drain, memory is handed back)
    return runs, (before, pss())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running service (default: start `khuluma serve` on a free port)")
    parser.add_argument("--token", default=os.environ.get("KHULUMA_TOKEN"), help="token for --url")
    parser.add_argument("--pid", type=int, help="with --url: the service's `khuluma serve` pid, to measure its PSS")
    parser.add_argument("--routes", default=",".join(ROUTES), help=f"some of {','.join(ROUTES)}")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of overload per route")
    parser.add_argument("--capacity-seconds", type=float, default=30.0, help="seconds of the capacity run")
    parser.add_argument("--capacity", action="append", default=[], help="ROUTE=REQ_PER_S: skip measuring it")
    parser.add_argument("--overload", type=float, default=4.0, help="load as a multiple of capacity")
    parser.add_argument("--concurrency", type=int, default=0, help="closed-loop clients (default: per route)")
    parser.add_argument("--max-in-flight", type=int, default=1024, help="open requests the load may hold")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a request counts as a timeout")
    json_option(parser)
    args = parser.parse_args()
    chosen = [r.strip() for r in args.routes.split(",") if r.strip()]
    if unknown := set(chosen) - set(ROUTES):
        parser.error(f"unknown routes {sorted(unknown)}; known: {', '.join(ROUTES)}")
    known = parse_capacity(args.capacity)

    work = Path(tempfile.mkdtemp(prefix="khuluma-overload-"))
    proc = None
    if args.url:
        if not args.token:
            parser.error("--url needs --token (or KHULUMA_TOKEN)")
        url, token, pid = args.url.rstrip("/"), args.token, args.pid
    else:
        print("starting khuluma serve ...", flush=True)
        proc, url, token = start_service(work)
        pid = proc.pid
    results: dict[str, dict[str, Outcomes]] = {}
    around: dict[str, tuple[float | None, float | None]] = {}
    try:
        routes = Routes(url, token, speech_sample(work) if "transcribe" in chosen else None)

        async def setup() -> None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
                await routes.setup(session, chosen)

        asyncio.run(setup())
        before = pss_mb(pid)
        for route in chosen:
            results[route], around[route] = asyncio.run(run_route(routes, route, args, known, lambda: pss_mb(pid)))
        after = pss_mb(pid)
    finally:
        if proc is not None:
            stop_service(proc)

    rows = [(f"{route}, {phase}", out.row()) for route, runs in results.items() for phase, out in runs.items()]
    print()
    print(table(rows))
    if before is None or after is None:
        print("\nPSS: not measured (give --pid with --url)")
    else:
        print(
            f"\nPSS of the service: {before:,.0f} MiB fresh, {after:,.0f} MiB at the end ({after - before:+,.0f} MiB)"
        )
        for route, (warm, loaded) in around.items():
            if warm is not None and loaded is not None:
                change = 100 * (loaded - warm) / warm
                print(
                    f"  {route}: {warm:,.0f} MiB warm (after its capacity run), {loaded:,.0f} MiB after its overload "
                    f"({change:+.1f} %)"
                )
    write_json(
        args.json,
        {
            "pss_mb": {
                "before": before,
                "after": after,
                "around_overload": {route: {"warm": w, "after": a} for route, (w, a) in around.items()},
            },
            "routes": {
                route: {phase: {**out.row(), "statuses": dict(out.statuses)} for phase, out in runs.items()}
                for route, runs in results.items()
            },
        },
    )


if __name__ == "__main__":
    main()

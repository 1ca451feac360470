"""Overload: the service given more work than it can take (issues #30 and #39), each side of a comparison in one run.

Runs (``--runs``, default all three):

1. **mixes**: on one route (``--route``: sentiment or transcribe), for each payload mix (``--mixes``: light, heavy, and
   mixed, one heavy in four), a closed loop at capacity (``--capacity-seconds``; clients that honour ``Retry-After``
   as the SDKs do; its p50/p99 are the unloaded figures), then an open loop at ``--overload`` (4) times that
   capacity for ``--duration`` s, arrivals evenly spaced whether earlier ones were answered or not: statuses,
   timeouts, connection errors, admitted p50/p99 and the p99's ratio to the unloaded one, admitted requests over
   30 s, how fast refusals came back, the health route's worst latency, and PSS warm (after the capacity run)
   against 5 s after the overload.
2. **noisy**: a quiet customer sends one light request every half second, alone for ``--quiet-seconds`` (its
   unloaded p95), then while another customer floods the same route from ``--flood-connections`` (64) connections
   that ignore ``Retry-After`` (each sends again the moment it has an answer): the quiet customer's share of 200s
   and p95 against its unloaded p95, the flooder's 200s and refusals per second.
3. **flood**: a steady load (a closed loop of light requests at capacity, honouring ``Retry-After``) alone, then
   beside the same flood from another customer, then the flood alone: admitted throughput with the flood against
   without, refusals per second (the service holds a refusal of a client back before its ``Retry-After`` until
   then), the cores the ingress replica, HAProxy and the load generator used meanwhile, and, in this process, what
   one refusal costs through the FastAPI app (refusals per CPU-second).

The PSS (proportional set size: shared pages counted once) and CPU of the service's processes are found from the
``khuluma serve`` command down (every process below it and every process of the sessions they lead: Ray's, the
replicas, SeaweedFS, HAProxy) rather than by name, so another Ray cluster on the machine is not counted.

    .venv/bin/python scripts/bench/bench_overload.py                    # starts `khuluma serve` itself
    .venv/bin/python scripts/bench/bench_overload.py --runs mixes --mixes heavy --duration 20 --capacity-seconds 10
    .venv/bin/python scripts/bench/bench_overload.py --route transcribe --runs mixes
    .venv/bin/python scripts/bench/bench_overload.py --url http://127.0.0.1:8000 --token khk_... \\
        --quiet-token khk_... --flood-token khk_... [--pid PID]

With ``--url`` the service is yours: the three tokens must belong to three customers without limits (``khuluma
token limits``), or their 429s mix with the service's own refusals; ``--pid`` (its ``khuluma serve`` pid) lets the
bench measure PSS and CPU, without it they are not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
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
LONG_S = 30.0  # an admitted request slower than this counts against the goal
RUNS = ("mixes", "noisy", "flood")
MIXES = ("light", "heavy", "mixed")
ROUTES = ("sentiment", "transcribe")
# closed-loop clients of the capacity run, per route and mix: enough to keep the route busy, few enough that it is
# not overloaded (its p99 is the unloaded one)
CONCURRENCY = {
    ("sentiment", "light"): 16,
    ("sentiment", "heavy"): 2,
    ("sentiment", "mixed"): 4,
    ("transcribe", "light"): 4,
    ("transcribe", "heavy"): 2,
    ("transcribe", "mixed"): 2,
}
SENTENCES = [
    "The service was excellent. The staff were rude though! I will come back next week.",
    "Ngijabule kakhulu namuhla. Ukudla bekubi kakhulu.",
    "Die kos was heerlik. Die diens was verskriklik.",
    "Ke thabile haholo kajeno. Kopano e qala ka hora ya borobong.",
]
HEAVY_SENTENCES = 60
SPEECH = "good morning, the weather today is sunny and warm"


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
    """What one load (one customer, one phase) got back."""

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

    @property
    def refused_per_s(self) -> float:
        return len(self.refused_ms) / self.seconds if self.seconds else 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for code, n in self.statuses.items() if code >= 500 and code != 503)

    def row(self) -> dict[str, Any]:
        health_bad = sum(1 for status, _ in self.health if status != 200)
        return {
            "offered/s": round(self.offered / self.seconds, 1) if self.seconds else 0,
            "200/s": round(self.admitted_per_s, 2),
            "p50 ms": round(pct(self.admitted_ms, 50), 1),
            "p95 ms": round(pct(self.admitted_ms, 95), 1),
            "p99 ms": round(pct(self.admitted_ms, 99), 1),
            "over 30 s": sum(1 for ms in self.admitted_ms if ms > LONG_S * 1000),
            "statuses": " ".join(f"{code}:{n}" for code, n in sorted(self.statuses.items())) or "-",
            "refused/s": round(self.refused_per_s, 1),
            "refusal p50 ms": round(pct(self.refused_ms, 50), 1),
            "timeouts": self.timeouts,
            "conn errors": self.connection_errors,
            "not sent": self.not_sent,
            "health max ms": round(max((ms for _, ms in self.health), default=float("nan")), 1),
            "health not 200": health_bad,
        }


# ------------------------------------------------------------------------------------------------ requests

Request = Callable[[aiohttp.ClientSession, int], Awaitable[tuple[int, float]]]  # (status, Retry-After seconds)


def _answer(r: aiohttp.ClientResponse) -> tuple[int, float]:
    retry = r.headers.get("Retry-After", "")
    return r.status, float(retry) if retry.isdigit() else 0.0


def heavy_text(i: int) -> str:
    """About 3,600 characters: sixty sentences, numbered so no two bodies are alike."""
    return " ".join(f"{SENTENCES[(i + k) % len(SENTENCES)]} ({i}.{k})" for k in range(HEAVY_SENTENCES // 2))


class Payloads:
    """One request function per route and mix, for one customer's token."""

    def __init__(self, url: str, speech: dict[str, bytes]) -> None:
        self.url, self.speech = url, speech

    def request(self, route: str, mix: str, token: str) -> Request:
        headers = {"X-CLIENT-TOKEN": token}

        def heavy_at(i: int) -> bool:
            return mix == "heavy" or (mix == "mixed" and i % 4 == 0)

        async def sentiment(session: aiohttp.ClientSession, i: int) -> tuple[int, float]:
            text = heavy_text(i) if heavy_at(i) else f"{SENTENCES[i % len(SENTENCES)]} Order {i}."
            url = f"{self.url}/api/v1/sentiment_analysis/process"
            async with session.post(url, headers=headers, json={"encoded_text": text}) as r:
                await r.read()
                return _answer(r)

        async def transcribe(session: aiohttp.ClientSession, i: int) -> tuple[int, float]:
            form = aiohttp.FormData()
            audio = self.speech["heavy" if heavy_at(i) else "light"]
            form.add_field("file", audio, filename=f"s{i}.wav", content_type="audio/wav")
            url = f"{self.url}/api/v2alpha/transcribe/sync/file?lang_code=eng"
            async with session.post(url, headers=headers, data=form) as r:
                await r.read()
                return _answer(r)

        return {"sentiment": sentiment, "transcribe": transcribe}[route]


async def _timed(
    send: Request, session: aiohttp.ClientSession, i: int, timeout: float
) -> tuple[int | str, float, float]:
    """(status or "timeout" or "connection", milliseconds, Retry-After seconds)."""
    t0 = time.perf_counter()
    retry = 0.0
    try:
        status, retry = await asyncio.wait_for(send(session, i), timeout)
    except TimeoutError:
        status = "timeout"
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError):
        status = "connection"
    return status, (time.perf_counter() - t0) * 1000, retry


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


def _session(connections: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=connections)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def _closed(
    session: aiohttp.ClientSession, send: Request, clients: int, until: float, out: Outcomes, polite: bool = True
) -> None:
    """``clients`` clients, each sending its next request when it has an answer, until ``until`` (monotonic). A
    ``polite`` client refused with ``Retry-After`` waits that long first (as the SDKs do); the others (a flood)
    send again at once."""
    counter = iter(range(10**9))

    async def client() -> None:
        while time.monotonic() < until:
            out.offered += 1
            status, ms, retry = await _timed(send, session, next(counter), 120)
            out.add(status, ms)
            if polite and retry:
                await asyncio.sleep(min(retry, max(0.0, until - time.monotonic())))

    await asyncio.gather(*(client() for _ in range(clients)))


async def closed_loop(url: str, send: Request, clients: int, seconds: float, timeout: float) -> Outcomes:
    """``clients`` clients, each sending its next request when the last is answered: the route at capacity."""
    out = Outcomes()
    counter = iter(range(10**9))
    async with _session(clients) as session:
        for _ in range(min(clients, 4)):  # warm-up: models loaded, connections open
            await _timed(send, session, next(counter), timeout)
        stop = asyncio.Event()
        health = asyncio.ensure_future(_probe_health(url, stop, out.health))
        start = time.monotonic()
        await _closed(session, send, clients, start + seconds, out)
        out.seconds = time.monotonic() - start
        stop.set()
        await health
    return out


async def open_loop(
    url: str, send: Request, rate: float, seconds: float, timeout: float, max_in_flight: int
) -> Outcomes:
    """Requests arrive at ``rate`` per second for ``seconds``, answered or not (at most ``max_in_flight`` open)."""
    out = Outcomes()
    in_flight: set[asyncio.Task[None]] = set()
    async with _session(max_in_flight) as session:
        stop = asyncio.Event()
        health = asyncio.ensure_future(_probe_health(url, stop, out.health))

        async def one(i: int) -> None:
            status, ms, _ = await _timed(send, session, i, timeout)
            out.add(status, ms)

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


async def paced(session: aiohttp.ClientSession, send: Request, every_s: float, until: float, out: Outcomes) -> None:
    """One request every ``every_s`` seconds until ``until``, each on time whether the last was answered or not."""
    tasks = []
    i = 0
    start = time.monotonic()
    while (at := start + i * every_s) < until:
        await asyncio.sleep(max(0.0, at - time.monotonic()))

        async def one(n: int = i) -> None:
            status, ms, _ = await _timed(send, session, n, 120)
            out.add(status, ms)

        out.offered += 1
        tasks.append(asyncio.ensure_future(one()))
        i += 1
    await asyncio.gather(*tasks)


# ------------------------------------------------------------------------------------------------ the service


def service_processes(pid: int) -> list[Any]:
    """Every process ``khuluma serve`` (``pid``) started (``runtime.processes.started_processes``), by pid."""
    from runtime.processes import started_processes

    return sorted(started_processes(pid), key=lambda p: p.pid)


def pss_by_process(pid: int | None) -> dict[int, tuple[str, float]]:
    """MiB of PSS of each process of the service, with its title."""
    if pid is None:
        return {}
    import psutil

    out = {}
    for process in service_processes(pid):
        try:
            title = " ".join(process.cmdline())[:60] or process.name()
            out[process.pid] = (title, process.memory_full_info().pss / MB)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def pss_mb(pid: int | None) -> float | None:
    return sum(mb for _, mb in pss_by_process(pid).values()) if pid is not None else None


def grew_most(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> str:
    """The process whose PSS grew most between two readings, and the processes started meanwhile (a replica the
    autoscaler added: configs/serve.yaml)."""
    grown = [(mb - before[pid][1], title) for pid, (title, mb) in after.items() if pid in before]
    new = [(mb, title) for pid, (title, mb) in after.items() if pid not in before]
    said = f"{max(grown)[1].strip()} {max(grown)[0]:+.0f} MiB" if grown else ""
    if new:
        said += f"; started meanwhile: {', '.join(f'{t.strip()} {mb:.0f} MiB' for mb, t in new)}"
    return said


def pss_of_those_before(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> float:
    """PSS after, of the processes that were there before (a replica started meanwhile left out)."""
    return sum(mb for pid, (_, mb) in after.items() if pid in before)


def cpu_seconds(pid: int | None) -> dict[str, float]:
    """CPU seconds (user + system) so far of the ingress replica and of HAProxy, by the process title."""
    if pid is None:
        return {}
    import psutil

    out: dict[str, float] = {}
    for process in service_processes(pid):
        try:
            title = " ".join(process.cmdline()) or process.name()
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for name, marker in (("ingress", "Ingress"), ("haproxy", "haproxy")):
            if marker in title:
                out[name] = out.get(name, 0.0) + times.user + times.system
    return out


def cpu_share(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores used per second between two :func:`cpu_seconds` readings."""
    return {name: (after[name] - before.get(name, 0.0)) / seconds for name in after} if seconds else {}


CUSTOMERS = ("overload", "quiet", "flood")


def start_service(work: Path) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    """``khuluma serve`` on a free port with its own data directory (``scripts/bench/_service.py``), and a token for
    each customer of :data:`CUSTOMERS`."""
    from scripts.bench._service import start_service as started

    proc, url, first = started(work, CUSTOMERS[0])
    env = {**os.environ, "KHULUMA_DATA_DIR": str(work / "data"), "RAY_AUTH_MODE": "disabled"}
    khuluma = str(Path(sys.executable).with_name("khuluma"))
    tokens = {CUSTOMERS[0]: first}
    for customer in CUSTOMERS[1:]:
        created = subprocess.run(
            [khuluma, "token", "create", "--customer", customer, "-q"], env=env, capture_output=True, text=True
        )
        created.check_returncode()
        tokens[customer] = created.stdout.strip()
    return proc, url, tokens


def speech_samples(work: Path) -> dict[str, bytes]:
    """A short clip (light) and one of about half a minute (heavy), spoken by espeak."""
    from tests.speechdata import espeak

    light = espeak(SPEECH, work / "light.wav").read_bytes()
    heavy = espeak(", ".join([SPEECH] * 10), work / "heavy.wav").read_bytes()
    return {"light": light, "heavy": heavy}


def app_refusals_per_cpu_s(work: Path, refusals: int = 3000) -> float:
    """Refusals per CPU-second of the ingress's FastAPI app alone, in this process (no uvicorn, no Serve): a
    sentiment request refused at capacity, with a verified token, as the flood's are."""
    from contracts.settings import Settings
    from persistence.session import migrate
    from serve_app.app import create_app
    from serve_app.context import Clients, build_context
    from serve_app.tokens import create_token

    settings = Settings(data_dir=work / "app-alone", _env_file=None)
    settings.ensure_dirs()
    migrate(settings.db_url)
    context = build_context(settings, Clients())
    app = create_app(settings, drain=context.drain, capacity=context.admission.capacity)
    app.state.context = context
    token = create_token(context.db, "flood")[0]
    context.tokens.verify(token)
    text = context.admission.capacity["text"]
    text.limit = 1000.0
    text.enter("someone else", 10_000.0)  # in flight: the next request is refused
    body = b'{"encoded_text": "The service was excellent. Order 1."}'
    path = "/api/v1/sentiment_analysis/process"
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [*headers, (b"x-client-token", token.encode())],
    }
    statuses: Counter[int] = Counter()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] += 1

    async def flood() -> float:
        started = time.process_time()
        for _ in range(refusals):
            await app(dict(scope), receive, send)
        return time.process_time() - started

    seconds = asyncio.run(flood())
    assert statuses == {503: refusals}, statuses
    context.usage.close()
    return refusals / seconds


# ------------------------------------------------------------------------------------------------ runs


@dataclass
class Bench:
    url: str
    tokens: dict[str, str]
    payloads: Payloads
    pid: int | None
    args: argparse.Namespace
    rows: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def send(self, mix: str, customer: str = "overload", route: str | None = None) -> Request:
        return self.payloads.request(route or self.args.route, mix, self.tokens[customer])

    async def mix(self, mix: str) -> None:
        """Capacity, then ``--overload`` times it, for one payload mix."""
        args, route = self.args, self.args.route
        send = self.send(mix)
        clients = args.concurrency or CONCURRENCY[(route, mix)]
        print(f"{route} {mix}: capacity ({clients} clients, {args.capacity_seconds:g} s) ...", flush=True)
        unloaded = await closed_loop(self.url, send, clients, args.capacity_seconds, args.timeout)
        capacity = unloaded.admitted_per_s
        if capacity <= 0:
            raise RuntimeError(f"{route} {mix}: no request succeeded at capacity; is the route served?")
        before = pss_by_process(self.pid)
        rate = args.overload * capacity
        print(f"{route} {mix}: {rate:.2f} req/s ({args.overload:g}x) for {args.duration:g} s ...", flush=True)
        loaded = await open_loop(self.url, send, rate, args.duration, args.timeout, args.max_in_flight)
        await asyncio.sleep(SETTLE_S)  # what the load left behind settles (queues drain, memory is handed back)
        after = pss_by_process(self.pid)
        self.rows += [
            (f"{route} {mix}, capacity", unloaded.row()),
            (f"{route} {mix}, {args.overload:g}x", loaded.row()),
        ]
        self.summary[f"{route} {mix}"] = {
            "capacity_per_s": capacity,
            "unloaded_p99_ms": pct(unloaded.admitted_ms, 99),
            "admitted_p99_ms": pct(loaded.admitted_ms, 99),
            "p99_ratio": pct(loaded.admitted_ms, 99) / pct(unloaded.admitted_ms, 99),
            "over_30_s": sum(1 for ms in loaded.admitted_ms if ms > LONG_S * 1000),
            "server_errors": loaded.server_errors,
            "timeouts": loaded.timeouts,
            "connection_errors": loaded.connection_errors,
            "health_max_ms": max((ms for _, ms in loaded.health), default=None),
            "pss_warm_mb": sum(mb for _, mb in before.values()) or None,
            "pss_after_mb": sum(mb for _, mb in after.values()) or None,
            "pss_after_same_processes_mb": pss_of_those_before(before, after) or None,
            "pss_grew_most": grew_most(before, after),
        }

    async def noisy(self) -> None:
        """The quiet customer alone, then beside the flood."""
        args = self.args
        quiet, flood = self.send("light", "quiet", "sentiment"), self.send("light", "flood", "sentiment")
        print(f"noisy: the quiet customer alone for {args.quiet_seconds:g} s ...", flush=True)
        alone = Outcomes()
        async with _session(4) as session:
            await _timed(quiet, session, 0, args.timeout)  # warm
            start = time.monotonic()
            await paced(session, quiet, 0.5, start + args.quiet_seconds, alone)
            alone.seconds = time.monotonic() - start
        print(
            f"noisy: beside a flood from {args.flood_connections} connections for {args.duration:g} s ...", flush=True
        )
        beside, flooder = Outcomes(), Outcomes()
        stop = asyncio.Event()
        health = asyncio.ensure_future(_probe_health(self.url, stop, beside.health))
        async with _session(4) as quiet_session, _session(args.flood_connections) as flood_session:
            start = time.monotonic()
            until = start + args.duration
            await asyncio.gather(
                _closed(flood_session, flood, args.flood_connections, until, flooder, polite=False),
                paced(quiet_session, quiet, 0.5, until, beside),
            )
            beside.seconds = flooder.seconds = time.monotonic() - start
        stop.set()
        await health
        flooder.health = beside.health
        self.rows += [
            ("noisy: quiet customer alone", alone.row()),
            ("noisy: quiet customer, flood beside", beside.row()),
            ("noisy: the flooding customer", flooder.row()),
        ]
        answered = sum(beside.statuses.values()) + beside.timeouts + beside.connection_errors
        self.summary["noisy"] = {
            "quiet_200_share": beside.statuses[200] / answered if answered else None,
            "quiet_unloaded_p95_ms": pct(alone.admitted_ms, 95),
            "quiet_p95_ms": pct(beside.admitted_ms, 95),
            "p95_ratio": pct(beside.admitted_ms, 95) / pct(alone.admitted_ms, 95),
            "flood_200_per_s": flooder.admitted_per_s,
            "flood_refused_per_s": flooder.refused_per_s,
            "server_errors": beside.server_errors + flooder.server_errors,
            "connection_errors": beside.connection_errors + flooder.connection_errors,
            "health_max_ms": max((ms for _, ms in beside.health), default=None),
        }

    async def flood(self) -> None:
        """A steady load alone, beside the flood, and the flood alone; the ingress's and HAProxy's CPU each time."""
        args = self.args
        steady, flood = self.send("light", "overload", "sentiment"), self.send("light", "flood", "sentiment")
        clients = CONCURRENCY[("sentiment", "light")]
        phases: dict[str, tuple[Outcomes, Outcomes, dict[str, float]]] = {}
        for phase in ("steady alone", "steady and flood", "flood alone"):
            print(f"flood: {phase} for {args.flood_seconds:g} s ...", flush=True)
            kept, flooded = Outcomes(), Outcomes()
            stop = asyncio.Event()
            health = asyncio.ensure_future(_probe_health(self.url, stop, kept.health))
            async with _session(clients) as steady_session, _session(args.flood_connections) as flood_session:
                if phase == "steady alone":
                    for i in range(4):
                        await _timed(steady, steady_session, i, args.timeout)  # warm
                cpu_before = cpu_seconds(self.pid)
                client_before = time.process_time()
                start = time.monotonic()
                until = start + args.flood_seconds
                loads = []
                if phase != "flood alone":
                    loads.append(_closed(steady_session, steady, clients, until, kept))
                if phase != "steady alone":
                    loads.append(_closed(flood_session, flood, args.flood_connections, until, flooded, polite=False))
                await asyncio.gather(*loads)
                kept.seconds = flooded.seconds = time.monotonic() - start
                cpu = cpu_share(cpu_before, cpu_seconds(self.pid), kept.seconds)
                cpu["load generator"] = (time.process_time() - client_before) / kept.seconds
            stop.set()
            await health
            flooded.health = kept.health
            phases[phase] = (kept, flooded, cpu)
            cores = " ".join(f"{name} {share:.2f}" for name, share in cpu.items()) or "not measured"
            if phase != "flood alone":
                self.rows.append((f"flood: {phase}, steady customer", {**kept.row(), "cores": cores}))
            if phase != "steady alone":
                self.rows.append((f"flood: {phase}, flooding customer", {**flooded.row(), "cores": cores}))
        alone, beside = phases["steady alone"], phases["steady and flood"]
        only = phases["flood alone"]
        total_beside = beside[0].admitted_per_s + beside[1].admitted_per_s
        ingress = only[2].get("ingress")
        self.summary["flood"] = {
            "admitted_per_s_without": alone[0].admitted_per_s,
            "admitted_per_s_with": total_beside,
            "steady_per_s_with": beside[0].admitted_per_s,
            "throughput_ratio": total_beside / alone[0].admitted_per_s if alone[0].admitted_per_s else None,
            "refused_per_s": beside[1].refused_per_s,
            "flood_alone_refused_per_s": only[1].refused_per_s,
            "flood_alone_refusal_p50_ms": pct(only[1].refused_ms, 50),
            "cores": {phase: cpu for phase, (_, _, cpu) in phases.items()},
            "ingress_cores_flood_alone": ingress,
            "server_errors": sum(o.server_errors for k, f, _ in phases.values() for o in (k, f)),
            "connection_errors": sum(o.connection_errors for k, f, _ in phases.values() for o in (k, f)),
            "health_max_ms": max((ms for k, _, _ in phases.values() for _, ms in k.health), default=None),
        }


def _print_summary(summary: dict[str, Any]) -> None:
    print("\nGoals (issue #39), from this run:")
    for name, got in summary.items():
        errors = f"5xx {got['server_errors']}, connection errors {got['connection_errors']}"
        health = f"health worst {got['health_max_ms']:.0f} ms"
        if name == "noisy":
            share, p95, alone = 100 * (got["quiet_200_share"] or 0), got["quiet_p95_ms"], got["quiet_unloaded_p95_ms"]
            print(
                f"  noisy neighbour: quiet customer {share:.1f} % 200s (goal >= 95 %), p95 {p95:.0f} ms = "
                f"{got['p95_ratio']:.2f}x its unloaded {alone:.0f} ms (goal <= 2x); flooder "
                f"{got['flood_200_per_s']:.1f} 200/s, {got['flood_refused_per_s']:.0f} refused/s; {errors}; {health}"
            )
        elif name == "flood":
            ratio = 100 * (got["throughput_ratio"] or 0)
            with_, without = got["admitted_per_s_with"], got["admitted_per_s_without"]
            alone, p50 = got["flood_alone_refused_per_s"], got["flood_alone_refusal_p50_ms"]
            cores = "; ".join(
                f"{phase}: " + ", ".join(f"{name} {share:.2f}" for name, share in shares.items())
                for phase, shares in got["cores"].items()
            )
            print(
                f"  flood: admitted {with_:.1f}/s beside it against {without:.1f}/s without = {ratio:.0f} % (goal >= "
                f"80 %); {got['refused_per_s']:.0f} refused/s beside it, {alone:.0f}/s alone (each held to its "
                f"Retry-After: p50 {p50:.0f} ms); a refusal costs {1000 / got['app_alone_refusals_per_cpu_s']:.2f} ms "
                f"of CPU in the FastAPI app ({got['app_alone_refusals_per_cpu_s']:.0f} per CPU-second); cores used "
                f"({cores}); {errors}; {health}"
            )
        else:
            pss = ""
            if got["pss_warm_mb"] and got["pss_after_mb"]:
                change = 100 * (got["pss_after_mb"] / got["pss_warm_mb"] - 1)
                same = 100 * (got["pss_after_same_processes_mb"] / got["pss_warm_mb"] - 1)
                pss = (
                    f", PSS {change:+.1f} %, of the processes there before {same:+.1f} % (goal within 5 %; grew most: "
                    f"{got['pss_grew_most']})"
                )
            print(
                f"  {name} at 4x: admitted p99 {got['admitted_p99_ms']:.0f} ms = {got['p99_ratio']:.2f}x the unloaded "
                f"{got['unloaded_p99_ms']:.0f} ms (goal <= 2x), over 30 s: {got['over_30_s']}, timeouts "
                f"{got['timeouts']}, {errors}, {health}{pss}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running service (default: start `khuluma serve` on a free port)")
    parser.add_argument("--token", default=os.environ.get("KHULUMA_TOKEN"), help="with --url: the load's token")
    parser.add_argument("--quiet-token", help="with --url: the quiet customer's token (noisy)")
    parser.add_argument("--flood-token", help="with --url: the flooding customer's token (noisy, flood)")
    parser.add_argument("--pid", type=int, help="with --url: the service's `khuluma serve` pid (PSS and CPU)")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"some of {','.join(RUNS)}")
    parser.add_argument("--route", default="sentiment", choices=ROUTES, help="the route of the mixes run")
    parser.add_argument("--mixes", default=",".join(MIXES), help=f"some of {','.join(MIXES)}")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of each overload and of noisy")
    parser.add_argument("--capacity-seconds", type=float, default=20.0, help="seconds of each capacity run")
    parser.add_argument("--quiet-seconds", type=float, default=20.0, help="seconds of the quiet customer alone")
    parser.add_argument("--flood-seconds", type=float, default=20.0, help="seconds of each phase of the flood run")
    parser.add_argument("--flood-connections", type=int, default=64, help="connections of the flooding customer")
    parser.add_argument("--overload", type=float, default=4.0, help="load as a multiple of capacity")
    parser.add_argument("--concurrency", type=int, default=0, help="closed-loop clients (default: per route, mix)")
    parser.add_argument("--max-in-flight", type=int, default=1024, help="open requests the load may hold")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a request counts as a timeout")
    json_option(parser)
    args = parser.parse_args()
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    if unknown := (set(runs) - set(RUNS)) | (set(mixes) - set(MIXES)):
        parser.error(f"unknown runs or mixes {sorted(unknown)}")

    work = Path(tempfile.mkdtemp(prefix="khuluma-overload-"))
    proc = None
    if args.url:
        if not (args.token and args.quiet_token and args.flood_token):
            parser.error("--url needs --token (or KHULUMA_TOKEN), --quiet-token and --flood-token")
        url, pid = args.url.rstrip("/"), args.pid
        tokens = {"overload": args.token, "quiet": args.quiet_token, "flood": args.flood_token}
    else:
        print("starting khuluma serve ...", flush=True)
        proc, url, tokens = start_service(work)
        pid = proc.pid
    speech = speech_samples(work) if args.route == "transcribe" and "mixes" in runs else {}
    bench = Bench(url, tokens, Payloads(url, speech), pid, args)
    try:
        before = pss_mb(pid)
        if "mixes" in runs:
            for mix in mixes:
                asyncio.run(bench.mix(mix))
        if "noisy" in runs:
            asyncio.run(bench.noisy())
        if "flood" in runs:
            asyncio.run(bench.flood())
            bench.summary["flood"]["app_alone_refusals_per_cpu_s"] = app_refusals_per_cpu_s(work)
        after = pss_mb(pid)
    finally:
        if proc is not None:
            from scripts.bench._service import stop_service

            stop_service(proc)

    print()
    print(table(bench.rows))
    if before is not None and after is not None:
        print(
            f"\nPSS of the service: {before:,.0f} MiB fresh, {after:,.0f} MiB at the end ({after - before:+,.0f} MiB)"
        )
    _print_summary(bench.summary)
    write_json(
        args.json,
        {"pss_mb": {"fresh": before, "end": after}, "summary": bench.summary, "rows": dict(bench.rows)},
    )


if __name__ == "__main__":
    main()

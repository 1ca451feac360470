"""Admission by capacity (``serve_app/admission/``): the cost of a request from its headers (and a transcription's
audio seconds from its file's header), the limit learned from the measured queueing delay, simulated on a 2-worker
and a 16-worker server with light, heavy and mixed payloads, the fair share between customers on the real
middleware, and the admission of live sessions by their measured real-time factor."""

from __future__ import annotations

import asyncio
import base64
import heapq
import io
import json
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from contracts.audio_length import FALLBACK_BYTES_PER_S, HEAD_BYTES, audio_seconds
from contracts.errors import Overloaded, RateLimited
from contracts.settings import AdmissionSettings, Settings
from contracts.speech import StreamRequest
from serve_app.admission.capacity import Capacity, Limiter
from serve_app.admission.cost import audio_in_body, header_cost
from serve_app.admission.kinds import RouteKinds, kind_named
from serve_app.admission.live import (
    CURRENT_SEAT,
    REALTIME_HEADROOM,
    UNMEASURED_SESSIONS,
    LiveSeat,
    LiveSessions,
    TimedSpeechClient,
)
from serve_app.app import create_app
from serve_app.context import Clients, build_context
from serve_app.lifecycle import Drain
from serve_app.middleware import AdmissionMiddleware
from serve_app.tokens import Principal, create_token, customer_limits

SENTIMENT = "/api/v1/sentiment_analysis/process"
KINDS = RouteKinds.of(create_app().routes)  # each model-bound route's kind of work, as the app's routes declare it


# ------------------------------------------------------------------------------------------------ the cost


def test_routes_are_sized_by_their_kind_of_work() -> None:
    named = {
        SENTIMENT: "text",
        "/v1/embeddings": "text",
        "/v1/translate": "translation",
        "/api/v1/search/knowledgebase/abc/query": "search",
        "/api/v1/search/knowledgebase/abc/document": "documents",
        "/api/v2alpha/transcribe/sync/file": "speech",
        "/api/v1/transcribe/sync": "speech",
        "/v1/audio/transcriptions": "speech",
        "/api/v1/entity_recognition/explain": "text",
        "/api/v1/search/knowledgebase/abc/ask": "llm",
        "/v1/chat/completions": "llm",
    }
    for path, kind in named.items():
        found = KINDS.kind_of("POST", path)
        assert found is not None and found.name == kind, path
    # not model-bound: management, uploads of async jobs, reads
    for method, path in [
        ("POST", "/api/v1/search/knowledgebase"),
        ("POST", "/api/v1/transport/file-upload"),
        ("GET", "/api/v1/search/knowledgebase/abc/documents"),
        ("GET", "/api/v1/health"),
    ]:
        assert KINDS.kind_of(method, path) is None
    text = kind_named("text")
    light = header_cost(text, {b"content-length": b"120"}, 0)
    heavy = header_cost(text, {b"content-length": b"3600"}, 0)
    assert heavy - light == 3480 and light == text.overhead + 120
    assert header_cost(text, {}, 900.0) == 900.0  # chunked: the typical cost of the kind
    speech = kind_named("speech")  # before the file's header is read: the size at a compressed speech bit rate
    assert header_cost(speech, {b"content-length": str(FALLBACK_BYTES_PER_S * 10).encode()}, 0) == pytest.approx(
        speech.overhead + 10
    )


def _audio(seconds: float, fmt: str, subtype: str, rate: int = 16000) -> bytes:
    tone = 0.1 * np.sin(np.arange(int(seconds * rate)) * 2 * math.pi * 220 / rate).astype("float32")
    out = io.BytesIO()
    sf.write(out, tone, rate, format=fmt, subtype=subtype)
    return out.getvalue()


@pytest.mark.parametrize(
    ("fmt", "subtype"), [("WAV", "PCM_16"), ("AIFF", "PCM_16"), ("FLAC", "PCM_16"), ("MP3", "MPEG_LAYER_III")]
)
def test_audio_seconds_come_from_the_file_header(fmt: str, subtype: str) -> None:
    data = _audio(7.0, fmt, subtype)
    assert audio_seconds(data[:HEAD_BYTES], len(data)) == pytest.approx(7.0, rel=0.03)
    assert audio_seconds(data[:HEAD_BYTES], len(data)) == audio_seconds(data[:512], len(data))  # the head is enough


def test_audio_seconds_of_an_mp4_whose_index_comes_first_and_of_unknown_bytes() -> None:
    mvhd = b"\x00\x00\x00\x00" + b"\x00" * 8 + (1000).to_bytes(4, "big") + (95_000).to_bytes(4, "big") + b"\x00" * 80
    moov = _mp4_box(b"moov", _mp4_box(b"mvhd", mvhd))
    head = _mp4_box(b"ftyp", b"M4A \x00\x00\x00\x00") + moov + _mp4_box(b"mdat", b"\x00" * 100)
    assert audio_seconds(head, 2_000_000) == pytest.approx(95.0)
    assert audio_seconds(b"\x13\x37" * 100, FALLBACK_BYTES_PER_S * 30) == pytest.approx(30.0)


def _mp4_box(kind: bytes, body: bytes) -> bytes:
    return (8 + len(body)).to_bytes(4, "big") + kind + body


def test_a_transcription_is_sized_from_its_upload_and_the_route_gets_every_byte() -> None:
    wav = _audio(12.0, "WAV", "PCM_16")
    boundary = "xyzzy"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + wav
        + f"\r\n--{boundary}--\r\n".encode()
    )
    v1 = json.dumps({"file_name": "a.wav", "audio_blob": base64.b64encode(wav).decode(), "file_size": 1}).encode()
    cases = [(body, f"multipart/form-data; boundary={boundary}"), (v1, "application/json")]
    for payload, content_type in cases:
        chunks = [payload[i : i + 8192] for i in range(0, len(payload), 8192)]

        async def receive(parts: list[bytes] = chunks) -> dict[str, Any]:
            part = parts.pop(0)
            return {"type": "http.request", "body": part, "more_body": bool(parts)}

        headers = {b"content-type": content_type.encode(), b"content-length": str(len(payload)).encode()}

        async def read_all(headers: dict[bytes, bytes] = headers, receive: Any = receive) -> tuple[float | None, bytes]:
            seconds, replay = await audio_in_body(receive, headers)
            got = b""
            while True:
                message = await replay()
                got += message["body"]
                if not message["more_body"]:
                    return seconds, got

        seconds, got = asyncio.run(read_all())
        assert seconds == pytest.approx(12.0, rel=0.01) and got == payload


# ------------------------------------------------------------------------------------------------ the adaptive limit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    """What a simulated run gave: latencies (s) of the admitted requests by cost, and the rest."""

    latencies: dict[float, list[float]] = field(default_factory=dict)
    refused: int = 0
    retry_after: list[int] = field(default_factory=list)
    done: int = 0
    seconds: float = 0.0

    def p99(self, cost: float) -> float:
        ordered = sorted(self.latencies[cost])
        return ordered[math.ceil(0.99 * len(ordered)) - 1]


def simulate(
    workers: int,
    unit_s: float,
    costs: list[float],
    rate: float,
    seconds: float,
    limiter: Limiter | None,
    customer: Callable[[int], int] = lambda _: 0,
    warm_s: float = 10.0,
    clock: Clock | None = None,
) -> Run:
    """A server of ``workers`` that serve a FIFO queue, each request taking 10 ms plus ``unit_s`` per unit of its
    cost, fed by Poisson arrivals at ``rate`` per second for ``seconds``, behind ``limiter`` (None: no admission).
    Only requests that arrive after ``warm_s`` are counted."""
    clock = clock or Clock()
    if limiter is not None:
        limiter.clock = clock
    rnd = random.Random(7)
    events: list[tuple[float, int, str, Any]] = []
    order = iter(range(10**9))
    t, i = 0.0, 0
    while t < seconds:
        heapq.heappush(events, (t, next(order), "arrive", (i, rnd.choice(costs))))
        t += rnd.expovariate(rate)
        i += 1
    queue: list[tuple[Any, float, float]] = []
    busy, run = 0, Run(seconds=seconds - warm_s)
    while events:
        clock.now, _, what, data = heapq.heappop(events)
        if what == "arrive":
            n, cost = data
            try:
                ticket = limiter.enter(customer(n), cost) if limiter is not None else None
            except (Overloaded, RateLimited) as refused:
                run.refused += 1
                run.retry_after.append(refused.retry_after)
                continue
            queue.append((ticket, clock.now, cost))
        else:
            ticket, arrived, cost = data
            busy -= 1
            if ticket is not None:
                limiter.leave(ticket, measured=True)  # type: ignore[union-attr]
            if arrived > warm_s:
                run.done += 1
                run.latencies.setdefault(cost, []).append(clock.now - arrived)
        while busy < workers and queue:
            ticket, arrived, cost = queue.pop(0)
            busy += 1
            heapq.heappush(events, (clock.now + 0.01 + cost * unit_s, next(order), "done", (ticket, arrived, cost)))
    return run


@pytest.mark.parametrize(("workers", "unit_s"), [(2, 2e-4), (16, 2e-4), (4, 2e-5)])
@pytest.mark.parametrize("costs", [[300.0], [4000.0], [300.0, 4000.0]], ids=["light", "heavy", "mixed"])
def test_at_four_times_capacity_the_admitted_keep_their_latency_on_any_server(
    workers: int, unit_s: float, costs: list[float]
) -> None:
    """2 cores, 16 cores, a server ten times faster: the same code, no figure set per server. At 4x capacity (from
    a cold start; measured once the limit has settled, after 20 s) the admitted requests keep within the allowed
    wait plus their own work, the server stays as busy as without admission, and without admission the queue grows
    without bound."""
    max_wait = 1.0
    mean_service = sum(0.01 + c * unit_s for c in costs) / len(costs)
    capacity = workers / mean_service
    admitted = simulate(workers, unit_s, costs, 4 * capacity, 60, Limiter("text", max_wait), warm_s=20)
    assert admitted.done / admitted.seconds >= 0.9 * capacity
    for cost in costs:
        own = 0.01 + cost * unit_s
        assert admitted.p99(cost) <= 1.5 * (max(max_wait, own) + own), (cost, admitted.p99(cost))
    unbounded = simulate(workers, unit_s, costs, 4 * capacity, 30, None)
    assert unbounded.p99(costs[0]) > 5 * admitted.p99(costs[0])


def test_retry_after_is_the_measured_drain_time() -> None:
    clock = Clock()
    limiter = Limiter("text", 1.0, clock=clock)
    simulate(2, 2e-4, [4000.0], 4 * 2 / 0.81, 40, limiter, clock=clock)  # a 2-worker server, measured
    assert limiter.drain_rate == pytest.approx(2 * 4000 / 0.81, rel=0.25)  # two workers' worth of cost per second
    limiter.enter(1, 40_000.0)  # nothing in flight: admitted, however large
    with pytest.raises(Overloaded) as refused:
        limiter.enter(1, 4000.0)
    assert refused.value.retry_after == math.ceil(40_000.0 / limiter.drain_rate) > 1


def test_a_burst_on_an_idle_server_is_admitted() -> None:
    """Requests one at a time leave the limit with room for a burst (it never shrinks to what was in flight)."""
    clock = Clock()
    limiter = Limiter("text", 1.0, clock=clock)
    for _ in range(20):
        ticket = limiter.enter(1, 300)
        clock.now += 0.07
        limiter.leave(ticket, measured=True)
        clock.now += 0.5
    burst = [limiter.enter(1, 300) for _ in range(8)]
    assert len(burst) == 8


def test_a_customer_past_its_concurrent_share_gets_429() -> None:
    clock = Clock()
    limiter = Limiter("speech", 1.0, clock=clock)
    limiter.limit = 100.0
    held = limiter.enter("a", 40, share_percent=50)
    with pytest.raises(RateLimited) as refused:
        limiter.enter("a", 20, share_percent=50)
    assert refused.value.reason == "concurrent_share" and refused.value.retry_after >= 1
    limiter.enter("b", 20, share_percent=50)  # another customer is not held back by it
    limiter.leave(held, measured=False)
    limiter.enter("a", 20, share_percent=50)


def test_a_fixed_ceiling_still_applies() -> None:
    limiter = Limiter("text", 1.0, ceiling=2, setting="KHULUMA_ADMISSION_TEXT_IN_FLIGHT")
    limiter.enter(1, 10)
    limiter.enter(1, 10)
    with pytest.raises(Overloaded) as refused:
        limiter.enter(2, 10)
    assert "KHULUMA_ADMISSION_TEXT_IN_FLIGHT" in refused.value.detail


def test_one_customer_flooding_cannot_lock_another_out() -> None:
    """Customer 0 floods at six times capacity; customer 1 sends a light request every half second and gets nearly
    all of them through at close to its unloaded latency."""
    clock = Clock()
    limiter = Limiter("text", 1.0, clock=clock)
    # warm: the flood alone first, so the limiter knows the server's capacity
    simulate(2, 2e-4, [300.0], 6 * 2 / 0.07, 20, limiter, warm_s=0, clock=clock)
    flood_rate = 6 * 2 / 0.07
    arrivals = int(flood_rate * 40)
    quiet = set(range(0, arrivals, int(flood_rate / 2)))  # every half second
    run = _two_customers(limiter, clock, flood_rate, 40, quiet)
    ok, refused, latencies = run[1]
    assert ok / (ok + refused) >= 0.95
    assert sorted(latencies)[int(0.95 * len(latencies))] <= 2 * 0.07
    flood_ok = run[0][0]
    assert flood_ok / 40 >= 0.7 * 2 / 0.07  # the flooder still gets most of the server


def test_customers_gone_quiet_do_not_hold_back_a_new_customers_burst() -> None:
    """After a flood, and a few light customers that were served and went quiet, a new customer's burst of light
    requests (8 at a time, the next sent as each is answered) is admitted whole on a server that takes it in time."""
    clock = Clock()
    limiter = Limiter("text", 1.0, clock=clock)
    # customer 0 floods heavy texts (1.76 s each) on a 1-worker server
    simulate(1, 7e-4, [2500.0], 4 / 1.76, 30, limiter, warm_s=0, clock=clock)
    for customer in (1, 2, 3):  # quick light requests (language detection, say), one at a time, then quiet
        ticket = limiter.enter(customer, 150.0)
        clock.now += 0.02
        limiter.leave(ticket, measured=True)
        clock.now += 0.3
    clock.now += 1.5
    in_flight: list[Any] = []
    for _ in range(12):
        if len(in_flight) == 8:  # a client with 8 workers: the next goes once the oldest is answered (0.1 s each)
            clock.now += 0.1
            limiter.leave(in_flight.pop(0), measured=True)
        in_flight.append(limiter.enter(4, 150.0))


def test_a_flood_that_starts_beside_a_quiet_customer_does_not_queue_ahead_of_it() -> None:
    """A quiet customer alone for 20 s (one light request every half second: the limiter has only seen requests
    alone), then 64 connections of another customer flood, each sending again at once: from the flood's first
    moment the quiet customer's requests wait for at most what is in service, never for a queue of the flood."""
    clock = Clock()
    limiter = Limiter("text", 1.0, clock=clock)
    service_s, alone_s, flood_s = 0.1, 20.0, 20.0
    rnd = random.Random(3)
    events: list[tuple[float, int, str, Any]] = []
    order = iter(range(10**9))
    for n in range(64):
        heapq.heappush(events, (alone_s + 0.001 * n, next(order), "send", 0))
    heapq.heappush(events, (0.0, next(order), "send", 1))
    queue: list[tuple[Any, float, int]] = []
    busy, quiet = 0, []
    while events and clock.now < alone_s + flood_s:
        clock.now, _, what, data = heapq.heappop(events)
        if what == "send":
            try:
                queue.append((limiter.enter(data, 150.0), clock.now, data))
            except (Overloaded, RateLimited):
                heapq.heappush(events, (clock.now + (0.01 if data == 0 else 0.5), next(order), "send", data))
        else:
            ticket, arrived, who = data
            busy -= 1
            limiter.leave(ticket, measured=True)
            if who == 1:
                quiet.append((arrived, clock.now - arrived))
            pause = 0.0 if who == 0 else max(0.0, 0.5 - (clock.now - arrived))
            heapq.heappush(events, (clock.now + pause, next(order), "send", who))
        while busy < 2 and queue:  # a 2-worker server
            ticket, arrived, who = queue.pop(0)
            busy += 1
            done_at = clock.now + service_s * rnd.uniform(0.8, 1.2)
            heapq.heappush(events, (done_at, next(order), "done", (ticket, arrived, who)))
    during = [latency for arrived, latency in quiet if arrived >= alone_s]
    assert len(during) >= 0.9 * flood_s * 2
    assert max(during) <= 2.5 * service_s, sorted(during)[-5:]


def _two_customers(
    limiter: Limiter, clock: Clock, rate: float, seconds: float, quiet: set[int]
) -> dict[int, tuple[int, int, list[float]]]:
    start = clock.now
    events: list[tuple[float, int, str, Any]] = []
    order = iter(range(10**9))
    for i in range(int(rate * seconds)):
        heapq.heappush(events, (start + i / rate, next(order), "arrive", 1 if i in quiet else 0))
    queue: list[tuple[Any, float, int]] = []
    busy = 0
    out: dict[int, tuple[int, int, list[float]]] = {0: (0, 0, []), 1: (0, 0, [])}
    while events:
        clock.now, _, what, data = heapq.heappop(events)
        if what == "arrive":
            try:
                queue.append((limiter.enter(data, 300.0), clock.now, data))
            except (Overloaded, RateLimited):
                ok, refused, lat = out[data]
                out[data] = (ok, refused + 1, lat)
        else:
            ticket, arrived, who = data
            busy -= 1
            limiter.leave(ticket, measured=True)
            ok, refused, lat = out[who]
            out[who] = (ok + 1, refused, [*lat, clock.now - arrived])
        while busy < 2 and queue:
            ticket, arrived, who = queue.pop(0)
            busy += 1
            heapq.heappush(events, (clock.now + 0.07, next(order), "done", (ticket, arrived, who)))
    return out


# ------------------------------------------------------------------------------------------------ the middleware


class HeldApp:
    """An ASGI app that holds every request until released, and counts the requests it saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.seen += 1
        while (await receive()).get("more_body"):
            pass
        if scope["path"] != "/api/v1/health":
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def reached(self, requests: int) -> None:
        for _ in range(1000):
            if self.seen >= requests:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the app saw {self.seen} requests, not {requests}")


def _edge(settings: Settings, app: HeldApp) -> tuple[httpx.AsyncClient, Any, Capacity]:
    """The admission middleware over ``app``, seeing a real context (tokens, customers' limits) as the ingress's."""
    context = build_context(settings, Clients())
    capacity = Capacity(settings.admission)
    middleware = AdmissionMiddleware(app, Drain(), capacity, KINDS)
    holder = SimpleNamespace(state=SimpleNamespace(context=context))

    async def with_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await middleware({**scope, "app": holder}, receive, send)

    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=with_app), base_url="http://khuluma")
    return client, context, capacity


def _token(context: Any, **limits: int) -> tuple[str, int]:
    token, info = create_token(context.db, f"cap-{uuid.uuid4().hex[:8]}", limits=limits or None)
    assert context.tokens.verify(token) is not None  # as authentication leaves it: in the replica's token cache
    return token, info.customer_id


def test_a_flooding_customer_is_refused_before_its_body_and_another_gets_in(settings: Settings) -> None:
    async def scenario() -> None:
        app = HeldApp()
        client, context, capacity = _edge(settings, app)
        flooder, flooder_id = _token(context)
        quiet, _ = _token(context)
        text = capacity["text"]
        body = {"encoded_text": "x" * 400}
        cost = len(json.dumps(body)) + kind_named("text").overhead
        text.limit, text.last_alone = 2.5 * cost, time.monotonic()  # as measured: two such requests fit
        async with client:
            held = [
                asyncio.create_task(client.post(SENTIMENT, json=body, headers={"X-CLIENT-TOKEN": flooder}))
                for _ in range(2)
            ]
            await app.reached(2)
            refused = await asyncio.wait_for(client.post(SENTIMENT, json=body, headers={"X-CLIENT-TOKEN": flooder}), 10)
            assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
            assert "at capacity for text" in refused.json()["detail"] and app.seen == 2  # the app never saw it
            openai = client.post("/v1/embeddings", json={"input": "x" * 400}, headers={"X-CLIENT-TOKEN": flooder})
            embeddings = await asyncio.wait_for(openai, 10)
            assert embeddings.status_code == 503 and embeddings.json()["error"]["type"]  # OpenAI's error shape
            other = asyncio.create_task(client.post(SENTIMENT, json=body, headers={"X-CLIENT-TOKEN": quiet}))
            await app.reached(3)  # the quiet customer is admitted past the limit: nothing of it was in flight
            again = await asyncio.wait_for(client.post(SENTIMENT, json=body, headers={"X-CLIENT-TOKEN": flooder}), 10)
            assert again.status_code == 503
            health = await asyncio.wait_for(client.get("/api/v1/health"), 10)  # not model-bound: never held up
            app.release.set()
            assert health.status_code == 200
            assert [r.status_code for r in await asyncio.gather(*held, other)] == [200, 200, 200]
            assert text.count == 0 and text.cost_in_flight == 0
        context.usage.flush_now()
        from tests.unit.test_admission import _refusals

        assert _refusals(context.db, flooder_id) == {"overloaded": 3}  # counted for the customer, never billed

    asyncio.run(scenario())


def test_past_its_concurrent_share_a_customer_gets_429_at_the_edge(settings: Settings) -> None:
    async def scenario() -> None:
        app = HeldApp()
        client, context, capacity = _edge(settings, app)
        token, customer = _token(context, concurrent_share=40)
        await context.admission.customers.limits_for(customer)  # as authentication reads them
        capacity["text"].limit, capacity["text"].last_alone = 10_000.0, time.monotonic()
        body = {"encoded_text": "y" * 3000}
        async with client:
            first = asyncio.create_task(client.post(SENTIMENT, json=body, headers={"X-CLIENT-TOKEN": token}))
            await app.reached(1)
            second = await asyncio.wait_for(client.post(SENTIMENT, json=body, headers={"X-CLIENT-TOKEN": token}), 10)
            assert second.status_code == 429 and "concurrent share" in second.json()["detail"]
            assert "Retry-After" in second.headers
            app.release.set()
            assert (await first).status_code == 200
        assert customer_limits(context.db, str(customer)) is not None

    asyncio.run(scenario())


def test_a_transcription_holds_the_audio_seconds_of_its_file(settings: Settings) -> None:
    async def scenario() -> None:
        app = HeldApp()
        client, _, capacity = _edge(settings, app)
        wav = _audio(30.0, "WAV", "PCM_16", rate=8000)
        async with client:
            sent = asyncio.create_task(
                client.post("/api/v2alpha/transcribe/sync/file", files={"file": ("a.wav", wav, "audio/wav")})
            )
            await app.reached(1)
            assert capacity["speech"].cost_in_flight == pytest.approx(30.0 + kind_named("speech").overhead, rel=0.01)
            app.release.set()
            assert (await sent).status_code == 200

    asyncio.run(scenario())


# ------------------------------------------------------------------------------------------------ live sessions


def test_a_live_session_is_admitted_only_while_every_open_one_keeps_real_time() -> None:
    live = LiveSessions(None, AdmissionSettings())  # type: ignore[arg-type]  # no customer seats: no database
    principal = Principal(1, 1, 1, "")

    async def scenario() -> None:
        first = await live.take(principal, 0)
        unmeasured = [await live.take(principal, 0) for _ in range(UNMEASURED_SESSIONS - 1)]
        with pytest.raises(Overloaded):  # nothing measured yet: a few at once, no more
            await live.take(principal, 0)
        for seat in unmeasured:
            await live.release(seat)
        for second in range(1, 11):  # its steps take a fifth of the audio they cover
            first.note_step(float(second), 0.2)
        assert first.realtime_factor() == pytest.approx(0.2, rel=0.01)
        seats = [first, *[await live.take(principal, 0) for _ in range(3)]]  # 0.2 per session: four fit
        assert live.session_load is not None and live.session_load * 5 > REALTIME_HEADROOM
        probe = await live.take(principal, 0)  # the load says no: one probe at a time measures it again
        assert probe.probe and not any(seat.probe for seat in seats)
        with pytest.raises(Overloaded) as refused:
            await live.take(principal, 0)
        assert refused.value.retry_after >= 1 and "real time" in refused.value.detail
        await live.release(probe)
        await live.release(seats.pop())
        assert not (await live.take(principal, 0)).probe  # one left: room again

    asyncio.run(scenario())


def test_streaming_steps_are_timed_against_the_session_that_made_them() -> None:
    class Handle:
        class live_step:  # a DeploymentHandle's method
            @staticmethod
            def remote(request: StreamRequest) -> Any:
                async def step() -> Any:
                    await asyncio.sleep(0.05)
                    return None

                return step()

    client = TimedSpeechClient(Handle())
    seat = LiveSeat(1)

    async def session() -> None:
        CURRENT_SEAT.set(seat)
        await client.live_step(StreamRequest(pcm=b"\x00" * 32000, offset=1.0))  # 1 s of audio after 1 s

    started = time.monotonic()
    asyncio.run(session())
    assert seat.heard_until == pytest.approx(2.0)
    assert 0.04 <= seat.busy_s <= time.monotonic() - started
    asyncio.run(client.live_step(StreamRequest(pcm=b"\x00" * 320)))  # outside a session: nothing noted
    assert seat.heard_until == pytest.approx(2.0)


def test_a_customer_back_before_its_retry_after_gets_its_refusal_only_then() -> None:
    from serve_app.middleware import Patience

    patience = Patience()

    async def timed(customer: int, retry_after: float) -> float:
        started = time.monotonic()
        await patience.hold(customer, retry_after)
        return time.monotonic() - started

    async def scenario() -> list[float]:
        first = await timed(1, 1)  # told to come back in a second
        early = await timed(1, 1)  # back at once: held until then
        other = await timed(2, 1)  # another customer's first refusal: at once
        await asyncio.sleep(1.05)
        patient = await timed(2, 1)  # came back when told: at once
        return [first, early, other, patient]

    first, early, other, patient = asyncio.run(scenario())
    assert first < 0.1 and other < 0.1 and patient < 0.1
    assert 0.8 <= early <= 1.5

"""Admission by the customer (issue #30): per-customer limits held across ingress replicas in the database, 429 with
``Retry-After`` and ``RateLimit`` headers, refusals counted but never billed, 503 with ``Retry-After`` from full
queues, health that stays answerable, and a replica's drain. Real SQLite, the real FastAPI app; no Ray cluster.
Admission by capacity and of live sessions: tests/unit/test_admission_capacity.py."""

from __future__ import annotations

import asyncio
import pickle
import re
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from starlette.testclient import WebSocketDenialResponse

from contracts.errors import Overloaded, RateLimited, http_status
from contracts.settings import AdmissionSettings, Settings
from persistence import admission_counts as store
from persistence.models import UsageRecord, UsageRefusal, utcnow
from persistence.session import Database
from persistence.usage_meter import UsageMeter
from serve_app.admission.customers import Customers
from serve_app.app import create_app
from serve_app.context import Clients, build_context, get_context
from serve_app.tokens import LIMIT_FIELDS, Principal, create_token, customer_limits, hash_token

STREAM = "/ws/stream-transcribe"  # GET with a token: an authenticated route that needs no deployment
USAGE = "/v1/transcribe/usage"


# ------------------------------------------------------------------------------------------------- helpers


def _customer(db: Database, **limits: int | None) -> tuple[str, Principal]:
    """A new customer with these limits: its token and its Principal."""
    name = f"adm-{uuid.uuid4().hex[:8]}"
    token, info = create_token(db, name, limits=dict(limits))
    return token, Principal(info.id, info.customer_id, info.project_id, "")


def _refusals(db: Database, customer_id: int) -> dict[str, int]:
    with db.session() as s:
        rows = s.execute(
            select(UsageRefusal.reason, UsageRefusal.count).where(UsageRefusal.customer_id == customer_id)
        ).all()
    out: dict[str, int] = {}
    for reason, count in rows:
        out[reason] = out.get(reason, 0) + count
    return out


def _usage_rows(db: Database, customer_id: int) -> list[str]:
    with db.session() as s:
        return list(s.scalars(select(UsageRecord.route).where(UsageRecord.customer_id == customer_id)))


def _app(settings: Settings, **handles: Any) -> TestClient:
    """The ingress app whose middleware and routes share the context's drain (as the Serve ingress builds it)."""
    context = build_context(settings, Clients.from_handles(settings, **handles))
    app = create_app(settings, drain=context.drain)
    app.dependency_overrides[get_context] = lambda: context
    client = TestClient(app, raise_server_exceptions=False)
    client.context = context  # type: ignore[attr-defined]
    return client


def exercise_admission_store(db: Database) -> None:
    """The shared counters' statements on a real database (also run on PostgreSQL by
    tests/integration/test_tokens_db.py): claims never pass the limit, a lowered limit grants nothing, seats are
    held once, refusals add up."""
    customer = create_token(db, f"store-{uuid.uuid4().hex[:8]}", limits={"concurrent_share": 30})[1].customer_id
    assert store.customer_limits(db, customer) == (None, None, None, 30)  # unset ones take the defaults
    assert store.customer_limits(db, -1) == (None, None, None, None)
    minute = 1_700_000_040
    assert store.claim_requests(db, customer, minute, 4, 10) == (4, 4)  # a new minute: inserted
    assert store.claim_requests(db, customer, minute, 4, 10) == (4, 8)
    assert store.claim_requests(db, customer, minute, 4, 10) == (2, 10)  # only what is left
    assert store.claim_requests(db, customer, minute, 4, 10) == (0, 10)  # used up
    assert store.claim_requests(db, customer, minute, 1, 5) == (0, 10)  # a limit lowered below the count
    assert store.claim_requests(db, customer, minute + 60, 3, 10) == (3, 3)  # the next minute starts afresh
    assert store.forget_windows(db, minute + 60) == 1
    assert store.claim_requests(db, customer, minute, 1, 10) == (1, 1)  # forgotten: counted again from zero

    assert store.take_live_slot(db, customer, 2, "s1", 60)
    assert store.take_live_slot(db, customer, 2, "s2", 60)
    assert not store.take_live_slot(db, customer, 2, "s3", 60)
    assert store.live_sessions_held(db, customer) == 2
    store.release_live_slot(db, "s1")
    assert store.take_live_slot(db, customer, 2, "s3", 60)
    store.renew_live_slots(db, ["s2", "s3"], -1)  # leases in the past: a replica that died
    assert store.live_sessions_held(db, customer) == 0
    assert store.take_live_slot(db, customer, 2, "s4", 60)  # an expired seat is taken over

    minute_start = utcnow().replace(second=0, microsecond=0)
    with db.session() as s:
        store.add_refusals(s, {(customer, minute_start, "requests_per_minute"): 2})
    with db.session() as s:
        store.add_refusals(s, {(customer, minute_start, "requests_per_minute"): 3, (customer, minute_start, "x"): 1})
    got = store.refusals_between(db, customer, minute_start + timedelta(seconds=30), minute_start + timedelta(hours=1))
    assert got == [(minute_start, 6)]  # every reason, the minute the range starts in included


# ------------------------------------------------------------------------------------------------- the store


def test_the_shared_counters_on_sqlite(db: Database) -> None:
    exercise_admission_store(db)


def test_the_migration_matches_the_models(db: Database) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from persistence.models import Base

    with db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_replicas_never_admit_more_than_the_limit_together(db: Database) -> None:
    """Four replicas (each its own customers' limits, thread and event loop) admit 40 concurrent requests each for one
    customer with a limit of 50 per minute: exactly 50 are admitted, whatever the interleaving."""
    _, principal = _customer(db, requests_per_minute=50)
    settings = AdmissionSettings(cache_seconds=0)
    now = datetime.now(UTC).timestamp()
    admitted: list[int] = []

    def replica() -> None:
        admission = Customers(db, UsageMeter(db, 0.2), settings, clock=lambda: now)  # one minute for all

        async def one() -> int:
            try:
                await admission.admit_request(principal)
                return 1
            except RateLimited:
                return 0

        async def many() -> int:
            return sum(await asyncio.gather(*(one() for _ in range(40))))

        admitted.append(asyncio.run(many()))

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(admitted) == 4 and sum(admitted) == 50


def test_a_new_minute_admits_again_and_the_limits_cache_expires(db: Database) -> None:
    _, principal = _customer(db, requests_per_minute=2)
    t = [1_700_000_000.0]  # 20 s into a minute
    admission = Customers(db, UsageMeter(db, 0.2), AdmissionSettings(cache_seconds=0), clock=lambda: t[0])

    async def go() -> None:
        first = await admission.admit_request(principal)
        assert first is not None and (first.limit, first.remaining, first.reset) == (2, 1, 40)
        await admission.admit_request(principal)
        with pytest.raises(RateLimited) as refused:
            await admission.admit_request(principal)
        assert refused.value.retry_after == 40 and refused.value.reason == "requests_per_minute"
        t[0] += 40  # the next minute
        assert (await admission.admit_request(principal)) is not None
        customer_limits(db, str(principal.token_id), {"requests_per_minute": 0})  # unlimited from now on
        assert (await admission.admit_request(principal)) is None  # no limit: no headers either

    asyncio.run(go())


def test_refusal_errors_survive_pickling_and_map_to_their_status() -> None:
    limited = pickle.loads(pickle.dumps(RateLimited("slow down", 2.2, limit=5, window_s=60, reason="r")))
    assert (limited.detail, limited.retry_after, limited.limit, limited.window_s, limited.reason) == (
        "slow down",
        3,  # whole seconds, rounded up
        5,
        60,
        "r",
    )
    shed = pickle.loads(pickle.dumps(Overloaded("full", 0.2)))
    assert (shed.detail, shed.retry_after) == ("full", 1)
    assert http_status(limited) == 429 and http_status(shed) == 503


# ------------------------------------------------------------------------------------------------- the edge


def test_past_the_limit_429_with_retry_after_and_ratelimit_headers(local_app, db) -> None:
    client = local_app(admission={"cache_seconds": 0})
    token, principal = _customer(db, requests_per_minute=3)
    h = {"X-CLIENT-TOKEN": token}
    answers = [client.get(STREAM, headers=h) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    for answer, remaining in zip(answers[:3], (2, 1, 0)):
        assert answer.headers["RateLimit-Policy"] == "3;w=60"
        limit, left, reset = (p.split("=")[1] for p in answer.headers["RateLimit"].split(", "))
        assert (limit, left) == ("3", str(remaining)) and 1 <= int(reset) <= 60
    refused = answers[3]
    assert (
        refused.json() == {"detail": refused.json()["detail"]} and "3 requests per minute" in refused.json()["detail"]
    )
    retry = int(refused.headers["Retry-After"])
    assert 1 <= retry <= 60
    assert refused.headers["RateLimit-Policy"] == "3;w=60"
    assert refused.headers["RateLimit"] == f"limit=3, remaining=0, reset={retry}"
    # a customer without a limit gets no such headers; the refused customer's neighbours are not affected
    other = _customer(db)[0]
    free = client.get(STREAM, headers={"X-CLIENT-TOKEN": other})
    assert free.status_code == 200 and "RateLimit" not in free.headers
    client.context.usage.flush_now()
    assert _refusals(db, principal.customer_id) == {"requests_per_minute": 1}


def test_the_limit_holds_across_two_ingress_replicas(local_app, db) -> None:
    first, second = local_app(admission={"cache_seconds": 0}), local_app(admission={"cache_seconds": 0})
    token, _ = _customer(db, requests_per_minute=40)  # replicas claim 2 at a time
    h = {"X-CLIENT-TOKEN": token}
    codes = [(first if i % 2 else second).get(STREAM, headers=h).status_code for i in range(50)]
    assert codes.count(200) == 40 and codes.count(429) == 10
    assert set(codes[40:]) == {429}


def test_refusals_are_reported_but_never_billed(local_app, db) -> None:
    client = local_app(admission={"cache_seconds": 0})
    token, principal = _customer(db, requests_per_minute=2)
    h = {"X-CLIENT-TOKEN": token}
    start = (utcnow() - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert client.get(STREAM, headers=h).status_code == 200
    assert client.get(STREAM, headers=h).status_code == 200
    assert client.get(STREAM, headers=h).status_code == 429
    assert client.get(STREAM, headers=h).status_code == 429
    customer_limits(db, str(principal.token_id), {"requests_per_minute": None})  # back to the default: unlimited
    end = (utcnow() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = client.get(USAGE, headers=h, params={"start_date_time": start, "end_date_time": end, "interval": "hour"})
    assert report.status_code == 200, report.text
    body = report.json()
    assert body["total_refused_invocations"] == 2
    assert body["total_invocations"] == 0 and body["total_failed_invocations"] == 0  # not invocations
    assert sum(b["total_refused_invocations"] for b in body["usage"]) == 2
    assert _usage_rows(db, principal.customer_id) == []


def test_audio_of_the_day_is_checked_before_a_transcription_starts(local_app, db) -> None:
    client = local_app(admission={"cache_seconds": 0})
    token, principal = _customer(db, audio_seconds_per_day=60)
    h = {"X-CLIENT-TOKEN": token}
    files = {"file": ("a.wav", b"RIFF0000WAVE", "audio/wav")}
    # below the limit the request goes on (here to the 503 of a service without a Speech deployment)
    assert client.post("/api/v2alpha/transcribe/sync/file", headers=h, files=files).status_code == 503
    with db.session() as s:
        s.add(UsageRecord(customer_id=principal.customer_id, route="transcribe_sync", seconds_transcribed=61.0))
        s.add(  # yesterday's audio does not count
            UsageRecord(
                customer_id=principal.customer_id,
                route="transcribe_sync",
                seconds_transcribed=500.0,
                created_at=utcnow() - timedelta(days=1),
            )
        )
    before = _usage_rows(db, principal.customer_id)
    for path in ("/api/v2alpha/transcribe/sync/file", "/v1/transcribe/sync"):
        refused = client.post(path, headers=h, files=files)
        assert refused.status_code == 429, refused.text
        assert "60 seconds per day" in refused.json()["detail"]
        retry = int(refused.headers["Retry-After"])
        now = datetime.now(UTC)
        midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        assert abs(retry - (midnight - now).total_seconds()) < 5
        assert refused.headers["RateLimit-Policy"] == "60;w=86400"
    refused = client.post("/api/v2alpha/transcribe/fast", headers=h, files={"upload": files["file"]})
    assert refused.status_code == 429
    client.context.usage.flush_now()
    assert _usage_rows(db, principal.customer_id) == before  # nothing billed for the refusals
    assert _refusals(db, principal.customer_id) == {"audio_seconds_per_day": 3}


def test_live_sessions_are_refused_before_the_upgrade(local_app, db) -> None:
    client = local_app(admission={"cache_seconds": 0, "live_sessions_per_replica": 3})
    token, principal = _customer(db, live_sessions=1)
    h = {"X-CLIENT-TOKEN": token}
    assert store.take_live_slot(db, principal.customer_id, 1, "elsewhere", 60)  # a session on another replica
    with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(STREAM, headers=h):
        pass
    assert denied.value.status_code == 429
    assert denied.value.headers["retry-after"] == "5" and "1 live sessions" in denied.value.json()["detail"]
    store.release_live_slot(db, "elsewhere")

    # this replica's own bound, whoever the customer: 503 with Retry-After
    live = client.context.admission.live

    async def hold(n: int) -> list[Any]:
        return [await live.take(principal, 0) for _ in range(n)]

    live.session_load, live.measured_at = 0.0, live.clock()  # measured far below real time: only the ceiling refuses
    seats = asyncio.run(hold(3))
    other = _customer(db)[0]
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        client.websocket_connect(STREAM, headers={"X-CLIENT-TOKEN": other}),
    ):
        pass
    assert denied.value.status_code == 503 and "KHULUMA_ADMISSION_LIVE_SESSIONS_PER_REPLICA" in denied.value.text
    # none ended here yet: as long again as the oldest open one has run (a moment), at least a second
    assert denied.value.headers["retry-after"] == "1"
    for seat in seats:
        asyncio.run(live.release(seat))
    client.context.usage.flush_now()
    assert _refusals(db, principal.customer_id) == {"live_sessions": 1}


# ------------------------------------------------------------------------------------------------- full queues


class _Method:
    def __init__(self, owner: _FakeHandle, name: str) -> None:
        self.owner, self.name = owner, name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        self.owner.calls.append(self.name)
        return self.owner.answer(self.name)


class _FakeHandle:
    """A DeploymentHandle whose calls answer with ``answer(name)`` (an awaitable)."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, []

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)


def _backpressure(retry_after_s: float | None = 3.0, wrapped: bool = False) -> Exception:
    from ray.serve.exceptions import BackPressureError

    error = BackPressureError(num_queued_requests=4, max_queued_requests=4, retry_after_s=retry_after_s)
    if wrapped:  # as it arrives from a deployment that called another one
        from ray.exceptions import RayTaskError

        return RayTaskError("call", "traceback", error).as_instanceof_cause()
    return error


def _refusing(error: Exception) -> _FakeHandle:
    async def answer(_name: str) -> Any:
        raise error

    return _FakeHandle(answer)


@pytest.mark.parametrize(("error", "retry"), [(None, 3), ("wrapped", 3), ("no-retry-after", 1)])
def test_a_full_deployment_queue_answers_503_at_once(db, settings, error: str | None, retry: int) -> None:
    from contracts.handles import call

    cause = _backpressure(None if error == "no-retry-after" else 3.0, wrapped=error == "wrapped")

    async def shed() -> None:
        raise cause

    with pytest.raises(Overloaded) as raised:
        asyncio.run(call(shed()))
    assert raised.value.retry_after == retry

    client = _app(settings, text=_refusing(cause))
    token, principal = _customer(db)
    answer = client.post(
        "/api/v1/sentiment_analysis/process", headers={"X-CLIENT-TOKEN": token}, json={"encoded_text": "Hello there"}
    )
    assert answer.status_code == 503 and answer.headers["Retry-After"] == str(retry)
    assert set(answer.json()) == {"detail"} and "at capacity" in answer.json()["detail"]
    client.context.usage.flush_now()
    assert _usage_rows(db, principal.customer_id) == []  # not billed
    assert _refusals(db, principal.customer_id) == {"overloaded": 1}


def test_the_ingress_text_queue_is_bounded() -> None:
    from contracts.batching import MicroBatcher

    release = asyncio.Event()

    async def slow(items: list[int]) -> list[int]:
        await release.wait()
        return items

    async def go() -> tuple[list[Any], list[Any]]:
        batcher = MicroBatcher(slow, max_size=2, max_in_flight=1, max_pending=3, name="sentiment")
        running = [asyncio.ensure_future(batcher.submit(i)) for i in range(2)]  # the list in flight
        await asyncio.sleep(0.01)
        waiting = [asyncio.ensure_future(batcher.submit(i)) for i in range(2, 5)]  # three may wait
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded) as shed:
            await batcher.submit(99)
        assert "3 sentiment requests are already waiting" in shed.value.detail
        release.set()
        return await asyncio.gather(*running), await asyncio.gather(*waiting)

    assert asyncio.run(go()) == ([0, 1], [2, 3, 4])


def test_health_stays_answerable_under_load(settings) -> None:
    """A deployment whose queue is full is healthy (alive, refusing work past its capacity); one that answered a
    moment ago is not pinged at all, so the probe never queues behind its requests."""

    async def answer(name: str) -> Any:
        if name == "ping":
            raise _backpressure()
        return []

    handle = _FakeHandle(answer)
    client = _app(settings, text=handle)
    body = client.get("/api/v1/health").json()
    assert client.get("/api/v1/health").status_code == 200
    assert {"name": "text", "healthy": True} in body["deployments"]
    pings = handle.calls.count("ping")
    client.context.clients.text.last_answer = time.monotonic()  # it just answered a request
    assert client.get("/health").status_code == 200
    assert handle.calls.count("ping") == pings  # no ping this time


# ------------------------------------------------------------------------------------------------- draining


def test_a_draining_replica_refuses_new_work_and_says_so(settings, db) -> None:
    client = _app(settings)
    token = _customer(db)[0]
    h = {"X-CLIENT-TOKEN": token}
    assert client.get(STREAM, headers=h).status_code == 200
    client.context.drain.begin()
    refused = client.get(STREAM, headers=h)
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
    assert refused.headers["Connection"] == "close" and "shutting down" in refused.json()["detail"]
    health = client.get("/api/v1/health")
    assert health.status_code == 503 and health.json() == {"status": "draining", "deployments": []}
    with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(STREAM, headers=h):
        pass
    assert denied.value.status_code == 503 and denied.value.headers["retry-after"] == "5"


def test_drain_waits_for_requests_in_flight_and_closes_live_sessions(settings, db) -> None:
    from serve_app.admission.kinds import RouteKinds
    from serve_app.admission.live import LiveSeat
    from serve_app.ingress import drain_replica
    from serve_app.lifecycle import SHUTTING_DOWN
    from serve_app.middleware import AdmissionMiddleware

    context = build_context(settings, Clients())
    _, principal = _customer(db)
    finish = asyncio.Event()

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        await finish.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    middleware = AdmissionMiddleware(slow_app, context.drain, context.admission.capacity, RouteKinds())

    async def request(path: str = "/x") -> int:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        await middleware({"type": "http", "path": path, "headers": []}, receive, send)
        return int(sent[0]["status"])

    async def go() -> tuple[int, int, bool, bool, LiveSeat]:
        in_flight = asyncio.ensure_future(request())
        await asyncio.sleep(0.01)
        seat = await context.admission.live.take(principal, 0)
        draining = asyncio.ensure_future(drain_replica(context, grace_s=5))
        await asyncio.sleep(0.05)
        refused = await request()  # admitted nothing new meanwhile
        assert context.drain.in_flight == 1 and not draining.done()
        finish.set()
        idle = await draining
        timed_out = not await context.drain.wait_idle(0)  # nothing left
        return await in_flight, refused, idle, timed_out, seat

    status, refused, idle, timed_out, seat = asyncio.run(go())
    assert (status, refused, idle, timed_out) == (200, 503, True, False)
    assert seat.stop.is_set() and seat.reason == SHUTTING_DOWN


# ------------------------------------------------------------------------------------------------- the command line


def test_token_create_and_limits(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from contracts.settings import get_settings
    from khuluma.cli import app

    monkeypatch.setenv("KHULUMA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KHULUMA_LIMITS_LIVE_SESSIONS", "4")  # the section's old name: still read
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        created = runner.invoke(
            app,
            [
                *("token", "create", "--customer", "acme", "--requests-per-minute", "20"),
                *("--audio-seconds-per-day", "3600", "--concurrent-share", "25"),
            ],
        )
        assert created.exit_code == 0, created.output
        token = created.output.strip().splitlines()[-1]
        shown = runner.invoke(app, ["token", "limits", "acme"])
        assert shown.exit_code == 0, shown.output
        cells = [[c for c in re.split(r"[\s│┃|]+", line) if c] for line in shown.output.splitlines()]
        lines = {row[0]: row[1:] for row in cells if row and row[0] in LIMIT_FIELDS}
        assert lines["requests_per_minute"] == ["20", "20"]
        assert lines["audio_seconds_per_day"] == ["3600", "3600"]
        assert lines["live_sessions"] == ["default", "4"]  # the operator's default applies
        assert lines["concurrent_share"] == ["25", "25%"]
        changed = runner.invoke(app, ["token", "limits", token, "--requests-per-minute", "0", "--live-sessions", "2"])
        assert changed.exit_code == 0, changed.output
        db = Database(get_settings().db_url)
        found = customer_limits(db, "acme")
        assert found is not None
        assert (found.requests_per_minute, found.audio_seconds_per_day, found.live_sessions) == (0, 3600, 2)
        reset = runner.invoke(app, ["token", "limits", "1", "--audio-seconds-per-day", "default"])  # by token id
        assert reset.exit_code == 0, reset.output
        assert customer_limits(db, "acme").audio_seconds_per_day is None  # type: ignore[union-attr]
        bad = runner.invoke(app, ["token", "limits", "acme", "--requests-per-minute", "lots"])
        assert bad.exit_code != 0 and "not a number" in bad.output
        over = runner.invoke(app, ["token", "limits", "acme", "--concurrent-share", "150"])
        assert over.exit_code != 0 and "at most 100" in over.output
        assert runner.invoke(app, ["token", "limits", "nobody"]).exit_code == 1
        with db.session() as s:  # the token was stored as a hash, the limits on the customer
            from persistence.models import ApiToken

            assert s.scalar(select(ApiToken.customer_id).where(ApiToken.token_hash == hash_token(token)))
    finally:
        get_settings.cache_clear()


def test_a_shed_job_keeps_its_attempts() -> None:
    from deployments.jobs import outcome_of

    shed = outcome_of(Overloaded("full", 5))
    assert shed.transient and shed.shed_for == 5 and shed.status_code == 503
    assert outcome_of(RuntimeError("bug")).shed_for == 0


def test_a_graceful_stop_ends_a_live_session_with_its_final_and_1001(local_app, db) -> None:
    """The session gets the transcript of the audio it sent (a ``final`` whose warnings say why), then the close
    code 1001 (going away) with the reason; its seat is given back."""
    from starlette.websockets import WebSocketDisconnect

    from serve_app.lifecycle import SHUTTING_DOWN

    client = local_app(["speech"])
    token = _customer(db)[0]
    live = client.context.admission.live
    with client.websocket_connect(STREAM + "?lang_code=eng", headers={"X-CLIENT-TOKEN": token}) as ws:
        assert ws.receive_json()["type"] == "ready"
        ws.send_bytes(b"\x00" * 64_000)  # 2 s of silence: one partial step, so the server has read it
        assert ws.receive_json()["type"] == "partial"
        assert len(live.open) == 1
        assert live.close_all(SHUTTING_DOWN) == 1  # what a graceful stop does (serve_app/ingress.py:drain_replica)
        final = ws.receive_json()
        assert final["type"] == "final" and final["audio_length_seconds"] == 2.0
        assert SHUTTING_DOWN in final["warnings"]
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1001 and closed.value.reason == SHUTTING_DOWN
    deadline = time.monotonic() + 5
    while live.open and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not live.open

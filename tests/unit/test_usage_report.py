"""GET /v1/transcribe/usage: totals and per-interval buckets of the caller's own usage records; 400s that say why."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest

from persistence.models import UsageRecord
from serve_app.services.usage_report import bucket_start, count_buckets, next_bucket

URL = "/v1/transcribe/usage"


@pytest.fixture()
def client(local_app):
    return local_app()


def _customer_ids(db, token: str) -> tuple[int, int]:
    from persistence.models import ApiToken
    from serve_app.tokens import hash_token

    with db.session() as s:
        row = s.query(ApiToken).filter(ApiToken.token_hash == hash_token(token)).one()
        return row.customer_id, row.project_id


def _add(
    db,
    customer_id: int,
    when: str,
    status: str = "successful",
    seconds: float = 0.0,
    tokens: int = 0,
    route: str = "transcribe.sync",
) -> None:
    with db.session() as s:
        s.add(
            UsageRecord(
                customer_id=customer_id,
                project_id=None,
                route=route,
                status=status,
                seconds_transcribed=seconds,
                tokens=tokens,
                created_at=datetime.strptime(when, "%Y-%m-%dT%H:%M:%S"),
            )
        )


@pytest.fixture()
def customer(db, make_token):
    """A fresh customer with a known usage history in March 2024 (and a neighbour whose usage must not show)."""
    name = f"usage-{uuid.uuid4().hex[:8]}"
    token = make_token(name)
    other_token = make_token(name + "-other")
    cid, _ = _customer_ids(db, token)
    other, _ = _customer_ids(db, other_token)
    _add(db, cid, "2024-03-01T09:15:10", "successful", seconds=12.5)
    _add(db, cid, "2024-03-01T09:15:50", "failed")
    _add(db, cid, "2024-03-01T10:05:00", "pending", route="transcribe.batch")
    _add(db, cid, "2024-03-03T23:59:59", "successful", tokens=40, route="ner")  # Sunday, last second
    _add(db, cid, "2024-03-04T00:00:00", "successful", seconds=7.25)  # Monday: next ISO week
    _add(db, cid, "2024-04-02T08:00:00", "successful", tokens=5, route="sentiment")
    _add(db, cid, "2024-02-29T23:59:59", "successful", seconds=99)  # before the range below
    _add(db, other, "2024-03-01T09:20:00", "successful", seconds=1000, tokens=1000)
    return token


def _get(client, token: str, start: str, end: str, interval: str | None = "day"):
    params = {"start_date_time": start, "end_date_time": end}
    if interval is not None:
        params["interval"] = interval
    return client.get(URL, params=params, headers={"X-CLIENT-TOKEN": token})


def test_totals_and_daily_buckets(client, customer):
    r = _get(client, customer, "2024-03-01T00:00:00Z", "2024-03-04T00:00:00Z", "day")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["start_date_time"] == "2024-03-01T00:00:00Z" and body["end_date_time"] == "2024-03-04T00:00:00Z"
    assert body["interval"] == "day"
    assert (
        body["total_invocations"],
        body["total_successful_invocations"],
        body["total_failed_invocations"],
        body["total_pending_invocations"],
    ) == (5, 3, 1, 1)
    assert body["total_seconds_transcribed"] == pytest.approx(19.75)
    assert body["total_tokens"] == 40  # the neighbour's 1000 tokens are not ours
    days = body["usage"]
    assert [d["start_date_time"] for d in days] == [
        "2024-03-01T00:00:00Z",
        "2024-03-02T00:00:00Z",
        "2024-03-03T00:00:00Z",
        "2024-03-04T00:00:00Z",
    ]
    assert [d["total_invocations"] for d in days] == [3, 0, 1, 1]
    assert days[0]["end_date_time"] == "2024-03-01T23:59:59Z"
    assert days[-1]["end_date_time"] == "2024-03-04T00:00:00Z"  # clipped to the range
    assert sum(d["total_seconds_transcribed"] for d in days) == pytest.approx(body["total_seconds_transcribed"])


def test_minute_hour_week_and_month_buckets(client, customer):
    minutes = _get(client, customer, "2024-03-01T09:14:30Z", "2024-03-01T09:16:00Z", "minute").json()
    assert [(m["start_date_time"], m["total_invocations"]) for m in minutes["usage"]] == [
        ("2024-03-01T09:14:30Z", 0),
        ("2024-03-01T09:15:00Z", 2),
        ("2024-03-01T09:16:00Z", 0),
    ]
    assert minutes["usage"][1]["total_failed_invocations"] == 1

    hours = _get(client, customer, "2024-03-01T09:00:00Z", "2024-03-01T10:59:59Z", "HOUR").json()
    assert hours["interval"] == "hour"
    assert [h["total_invocations"] for h in hours["usage"]] == [2, 1]
    assert hours["usage"][1]["total_pending_invocations"] == 1

    weeks = _get(client, customer, "2024-03-01T00:00:00Z", "2024-03-10T00:00:00Z", "week").json()
    assert [(w["start_date_time"], w["total_invocations"]) for w in weeks["usage"]] == [
        ("2024-03-01T00:00:00Z", 4),
        ("2024-03-04T00:00:00Z", 1),
    ]  # ISO weeks start on Monday

    months = _get(client, customer, "2024-02-15T00:00:00Z", "2024-04-30T23:59:59Z", "month").json()
    assert [(m["start_date_time"], m["total_invocations"]) for m in months["usage"]] == [
        ("2024-02-15T00:00:00Z", 1),
        ("2024-03-01T00:00:00Z", 5),
        ("2024-04-01T00:00:00Z", 1),
    ]
    assert months["total_tokens"] == 45


def test_empty_range_has_zero_totals(client, customer):
    body = _get(client, customer, "2030-01-01T00:00:00Z", "2030-01-01T02:00:00Z", "hour").json()
    assert body["total_invocations"] == 0 and len(body["usage"]) == 3
    assert all(b["total_invocations"] == 0 for b in body["usage"])


@pytest.mark.parametrize(
    ("start", "end", "interval", "needle"),
    [
        ("2024-03-01", "2024-03-02T00:00:00Z", "day", "start_date_time"),
        ("2024-03-01T00:00:00Z", "2024/03/02 00:00:00", "day", "end_date_time"),
        ("2024-13-01T00:00:00Z", "2024-03-02T00:00:00Z", "day", "start_date_time"),
        ("2024-03-01T00:00:00Z", "2024-03-02T00:00:00Z", "fortnight", "interval"),
        ("2024-03-02T00:00:00Z", "2024-03-01T00:00:00Z", "day", "after end_date_time"),
        ("2023-01-01T00:00:00Z", "2024-01-01T00:00:00Z", "minute", "coarser interval"),
    ],
)
def test_bad_requests_say_which_field(client, customer, start, end, interval, needle):
    r = _get(client, customer, start, end, interval)
    assert r.status_code == 400, r.text
    assert needle in r.json()["detail"]


def test_missing_date_and_missing_token(client, customer):
    r = client.get(URL, params={"end_date_time": "2024-03-02T00:00:00Z"}, headers={"X-CLIENT-TOKEN": customer})
    assert r.status_code == 400 and "start_date_time" in r.json()["detail"]
    assert (
        client.get(
            URL, params={"start_date_time": "2024-03-01T00:00:00Z", "end_date_time": "2024-03-02T00:00:00Z"}
        ).status_code
        == 401
    )


def test_bucket_arithmetic():
    t = datetime(2024, 12, 31, 23, 59, 30)
    assert bucket_start(t, "week") == datetime(2024, 12, 30)
    assert next_bucket(bucket_start(t, "month"), "month") == datetime(2025, 1, 1)
    assert count_buckets(datetime(2024, 1, 31), datetime(2024, 3, 1), "month") == 3
    assert count_buckets(datetime(2024, 1, 1), datetime(2024, 1, 1, 23, 59, 59), "hour") == 24

"""Admission by capacity through Ray Serve (the session app, ``khuluma serve``'s own): a flood that ignores
``Retry-After`` is refused at the edge at once, and the service stays up."""

from __future__ import annotations

import asyncio
import time

import httpx

SENTENCES = ["Ngijabule kakhulu namuhla.", "The staff were rude though!", "Die kos was heerlik.", "Ke thabile haholo."]


def _heavy(i: int) -> str:
    return " ".join(f"{SENTENCES[k % 4]} ({i}.{k})" for k in range(60))  # about 2,500 characters, 60 sentences


def test_a_flood_that_ignores_retry_after_is_refused_at_once_and_the_service_stays_up(serve_url, make_token) -> None:
    """After three requests one at a time, 32 connections send heavy sentiment requests for 10 s, each again the
    moment it has an answer: only 200s and 503s, each 503 with ``Retry-After`` and answered within milliseconds, no
    admitted request near 30 s, no connection error, the health route answering within a second throughout, and a
    request after it all answered."""
    token = make_token("flood-test")
    url = f"{serve_url}/api/v1/sentiment_analysis/process"
    statuses: list[int] = []
    admitted: list[float] = []
    refused: list[float] = []
    retry_after: list[str | None] = []
    health: list[tuple[int, float]] = []

    async def flood() -> None:
        limits = httpx.Limits(max_connections=40, max_keepalive_connections=40)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            for i in range(3):  # a service that has served: its limit for text measured on these
                warm = await client.post(url, headers={"X-CLIENT-TOKEN": token}, json={"encoded_text": _heavy(-i)})
                assert warm.status_code == 200, warm.text
            stop_at = time.monotonic() + 10

            async def connection(n: int) -> None:
                i = n * 10_000
                while time.monotonic() < stop_at:
                    i += 1
                    started = time.monotonic()
                    answer = await client.post(url, headers={"X-CLIENT-TOKEN": token}, json={"encoded_text": _heavy(i)})
                    took = time.monotonic() - started
                    statuses.append(answer.status_code)
                    if answer.status_code == 200:
                        admitted.append(took)
                    else:
                        refused.append(took)
                        retry_after.append(answer.headers.get("Retry-After"))

            async def probe() -> None:
                while time.monotonic() < stop_at:
                    started = time.monotonic()
                    answer = await client.get(f"{serve_url}/api/v1/health")
                    health.append((answer.status_code, time.monotonic() - started))
                    await asyncio.sleep(0.5)

            await asyncio.gather(probe(), *(connection(n) for n in range(32)))

    asyncio.run(flood())
    assert set(statuses) == {200, 503}, sorted(set(statuses))
    assert all(value is not None and int(value) >= 1 for value in retry_after)
    assert sorted(refused)[len(refused) // 2] < 0.1  # a refusal costs next to nothing: answered at once
    assert max(admitted) < 30
    assert health and all(status == 200 and took < 1.0 for status, took in health), health
    after = httpx.post(url, headers={"X-CLIENT-TOKEN": token}, json={"encoded_text": "Sawubona."}, timeout=60)
    assert after.status_code == 200, after.text

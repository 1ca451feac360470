"""Admission by capacity through Ray Serve (the session app, ``khuluma serve``'s own): a flood that ignores
``Retry-After`` is refused at the edge, held to its ``Retry-After``, and the service stays up for everyone else."""

from __future__ import annotations

import asyncio
import time

import httpx

SENTENCES = ["Ngijabule kakhulu namuhla.", "The staff were rude though!", "Die kos was heerlik.", "Ke thabile haholo."]
FLOOD_S = 10
CONNECTIONS = 32


def _heavy(i: int) -> str:
    return " ".join(f"{SENTENCES[k % 4]} ({i}.{k})" for k in range(60))  # about 2,500 characters, 60 sentences


def test_a_flood_that_ignores_retry_after_is_refused_and_held_and_the_service_stays_up(serve_url, make_token) -> None:
    """After three requests one at a time, 32 connections of one customer send heavy sentiment requests for 10 s,
    each again the moment it has an answer, while another customer sends a light one every half second: only 200s
    and 503s, each 503 with ``Retry-After``; the flood's refusals held to it (so its connections send about one
    request a second, not hundreds); no admitted request near 30 s; the quiet customer served, never held; the health
    route answering within a second throughout; and a request after it all answered."""
    flooder, quiet = make_token("flood-test"), make_token("quiet-test")
    url = f"{serve_url}/api/v1/sentiment_analysis/process"
    flood: list[tuple[int, float, str | None]] = []  # status, seconds, Retry-After
    calm: list[tuple[int, float]] = []
    health: list[tuple[int, float]] = []

    async def post(client: httpx.AsyncClient, token: str, text: str) -> tuple[int, float, str | None]:
        started = time.monotonic()
        answer = await client.post(url, headers={"X-CLIENT-TOKEN": token}, json={"encoded_text": text})
        return answer.status_code, time.monotonic() - started, answer.headers.get("Retry-After")

    async def run() -> None:
        limits = httpx.Limits(max_connections=CONNECTIONS + 8, max_keepalive_connections=CONNECTIONS + 8)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            for i in range(3):  # a service that has served: its limit for text measured on these
                status, _, _ = await post(client, flooder, _heavy(-i))
                assert status == 200
            assert (await post(client, quiet, "Sawubona."))[0] == 200  # its token verified, as a customer's is
            stop_at = time.monotonic() + FLOOD_S

            async def connection(n: int) -> None:
                i = n * 10_000
                while time.monotonic() < stop_at:
                    i += 1
                    flood.append(await post(client, flooder, _heavy(i)))

            async def calm_customer() -> None:
                i = 0
                while time.monotonic() < stop_at:
                    i += 1
                    status, took, _ = await post(client, quiet, f"Ngiyabonga kakhulu {i}.")
                    calm.append((status, took))
                    await asyncio.sleep(max(0.0, 0.5 - took))

            async def probe() -> None:
                while time.monotonic() < stop_at:
                    started = time.monotonic()
                    answer = await client.get(f"{serve_url}/api/v1/health")
                    health.append((answer.status_code, time.monotonic() - started))
                    await asyncio.sleep(0.5)

            await asyncio.gather(probe(), calm_customer(), *(connection(n) for n in range(CONNECTIONS)))

    asyncio.run(run())
    statuses = {status for status, _, _ in flood} | {status for status, _ in calm}
    assert statuses == {200, 503}, sorted(statuses)
    refused = [(took, retry) for status, took, retry in flood if status == 503]
    assert all(retry is not None and int(retry) >= 1 for _, retry in refused)
    # held to Retry-After: about one refusal per connection and second (and the first of each at once), not hundreds
    assert len(refused) <= CONNECTIONS * (FLOOD_S + 3), len(refused)
    assert max(took for status, took, _ in flood if status == 200) < 30
    assert sum(status == 200 for status, _ in calm) >= len(calm) // 2, calm
    assert all(took < 1.0 for status, took in calm if status == 503), calm  # a patient customer is never held
    assert health and all(status == 200 and took < 1.0 for status, took in health), health
    after = httpx.post(url, headers={"X-CLIENT-TOKEN": flooder}, json={"encoded_text": "Sawubona."}, timeout=60)
    assert after.status_code == 200, after.text

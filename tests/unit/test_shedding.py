"""Load shedding at the edge (``serve_app/shedding.py`` in ``AdmissionMiddleware``): past a capability's bound of
requests in flight on this replica, the next model-bound request answers 503 with ``Retry-After`` at once, in the
route's error shape, before the app (authentication, the body) runs; other routes and other capabilities pass."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from contracts.settings import LimitsSettings
from serve_app.lifecycle import Drain
from serve_app.middleware import AdmissionMiddleware
from serve_app.shedding import InFlightBounds, capability_of


class SlowApp:
    """An ASGI app that holds every request until released, and counts the requests it saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.seen += 1
        if scope["path"] != "/api/v1/health":
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def reached(self, requests: int, timeout_s: float = 10) -> None:
        """Wait until the app has seen this many requests."""
        for _ in range(int(timeout_s / 0.01)):
            if self.seen >= requests:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the app saw {self.seen} requests, not {requests}")


def _client(app: SlowApp, **limits: int) -> httpx.AsyncClient:
    middleware = AdmissionMiddleware(app, drain=Drain(), bounds=InFlightBounds(LimitsSettings(**limits)))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware), base_url="http://khuluma")


def test_routes_count_against_their_capability() -> None:
    assert capability_of("POST", "/api/v1/sentiment_analysis/process") == "text"
    assert capability_of("POST", "/v1/embeddings") == "text"
    assert capability_of("POST", "/api/v1/search/knowledgebase/abc/query") == "search"
    assert capability_of("POST", "/api/v2alpha/transcribe/sync/file") == "speech"
    assert capability_of("POST", "/v1/audio/transcriptions") == "speech"
    assert capability_of("POST", "/v1/translate") == "translation"
    # not model-bound: management, uploads of async jobs, reads
    assert capability_of("POST", "/api/v1/search/knowledgebase") is None
    assert capability_of("POST", "/api/v1/transport/file-upload") is None
    assert capability_of("GET", "/api/v1/search/knowledgebase/abc/documents") is None
    assert capability_of("GET", "/api/v1/health") is None


def test_one_past_the_bound_is_refused_at_once_and_the_slot_comes_back() -> None:
    async def scenario() -> None:
        app = SlowApp()
        async with _client(app, text_in_flight=2, search_in_flight=1) as client:
            body = {"encoded_text": "Sawubona"}
            held = [asyncio.create_task(client.post("/api/v1/sentiment_analysis/process", json=body)) for _ in range(2)]
            await app.reached(2)
            refused = await asyncio.wait_for(client.post("/api/v1/entity_recognition/process", json=body), 5)
            assert refused.status_code == 503
            assert refused.headers["Retry-After"] == "1"
            assert (
                "at capacity" in refused.json()["detail"]
                and "KHULUMA_LIMITS_TEXT_IN_FLIGHT" in refused.json()["detail"]
            )
            assert app.seen == 2  # refused before the app (authentication, the body) ran
            openai = await asyncio.wait_for(client.post("/v1/embeddings", json={"input": "x"}), 5)
            assert openai.status_code == 503 and openai.json()["error"]["type"]  # OpenAI's error shape there
            # another capability and the health route are not held up by text's bound
            health = await asyncio.wait_for(client.get("/api/v1/health"), 5)
            assert health.status_code == 200
            search = asyncio.create_task(client.post("/api/v1/search/knowledgebase/kb/query", json={"query": "x"}))
            await app.reached(4)
            app.release.set()
            assert [r.status_code for r in await asyncio.gather(*held, search)] == [200, 200, 200]
            again = await asyncio.wait_for(client.post("/api/v1/sentiment_analysis/process", json=body), 5)
            assert again.status_code == 200  # the slots were given back

    asyncio.run(scenario())


def test_zero_means_no_bound() -> None:
    async def scenario() -> None:
        app = SlowApp()
        async with _client(app, speech_in_flight=0) as client:
            held = [asyncio.create_task(client.post("/api/v2alpha/transcribe/fast")) for _ in range(20)]
            await app.reached(20)
            app.release.set()
            assert {r.status_code for r in await asyncio.gather(*held)} == {200}

    asyncio.run(scenario())

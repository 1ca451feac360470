"""The language model on real Ray Serve: the shared app without one (the extractive answerer; chat 503), and an
LLM deployment with a tiny random Llama model in the same cluster, streamed through its typed handle across
processes (Serve's streaming handle), generated whole, and reloaded through ``user_config``."""

from __future__ import annotations

import asyncio
import shutil

import httpx
import pytest

pytestmark = pytest.mark.integration
APP = "llm-under-test"


def test_without_a_model_ask_is_extractive_and_chat_answers_503(serve_url, make_token):
    headers = {"X-CLIENT-TOKEN": make_token("ask-integration")}
    kb = httpx.post(f"{serve_url}/api/v1/search/knowledgebase", headers=headers, json={"knowledgebase_name": "k"})
    ask = httpx.post(
        f"{serve_url}/api/v1/search/knowledgebase/{kb.json()['id']}/ask",
        headers=headers,
        json={"question": "When does the clinic open?", "stream": True},
        timeout=60,
    )
    assert ask.status_code == 200 and '"type": "done"' in ask.text  # the extractive answerer (an empty one: refused)
    chat = httpx.post(
        f"{serve_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {headers['X-CLIENT-TOKEN']}"},
        json={"model": "any", "messages": [{"role": "user", "content": "Sawubona"}]},
        timeout=60,
    )
    assert chat.status_code == 503 and chat.json()["error"]["code"] == "model_not_installed"
    models = httpx.get(f"{serve_url}/api/v1/models", timeout=60).json()["capabilities"]
    [entry] = [c for c in models if c["capability"] == "llm"]
    assert entry["installed"] is True and entry["model"] == "extractive"
    deployed = {d["name"] for d in httpx.get(f"{serve_url}/api/v1/health", timeout=60).json()["deployments"]}
    assert "llm" not in deployed  # no model, no replica


def test_the_typed_handle_streams_from_a_replica(serve_url, settings, tiny_llm, tmp_path):
    from ray import serve

    from contracts.llm import (
        ChatMessage,
        GenerationDelta,
        GenerationEnd,
        GenerationRequest,
        GenerationStart,
        LLMClient,
        Sampling,
        Source,
    )
    from deployments.llm import LLM

    other = tmp_path / "other"
    shutil.copytree(tiny_llm.ct2, other)
    bound = settings.updated({"llm": {"threads": 1, "max_answer_tokens": 12}}).for_replica(("llm",))
    deployment = serve.deployment(LLM, name="LLMUnderTest").options(ray_actor_options={"num_cpus": 0.1})
    deployment._version = APP  # a user_config change reconfigures the live replica
    request = GenerationRequest(
        messages=[ChatMessage(role="user", content="When does the clinic open?")],
        sources=[Source(text="The clinic opens at 08:00.", title="clinic.txt")] * 3,
        grounded=True,
        sampling=Sampling(max_tokens=8),
    )

    def deploy(model) -> LLMClient:
        app = deployment.options(user_config={"model": str(model)}).bind(bound)
        return LLMClient(serve.run(app, name=APP, route_prefix=None))

    async def scenario() -> None:
        client = await asyncio.to_thread(deploy, tiny_llm.ct2)
        events = [event async for event in client.stream(request)]
        start, *deltas, end = events
        assert isinstance(start, GenerationStart) and start.model == "ct2" and start.sources_used == [0, 1, 2]
        assert deltas and all(isinstance(d, GenerationDelta) for d in deltas)
        assert isinstance(end, GenerationEnd) and end.completion_tokens == 8 and end.finish_reason == "length"
        whole = await client.generate(request)
        assert whole.text == "".join(d.text for d in deltas)  # greedy: the same answer
        together = await asyncio.gather(*(client.generate(request) for _ in range(4)))
        assert {g.text for g in together} == {whole.text}
        client = await asyncio.to_thread(deploy, other)  # a new model through user_config
        assert (await client.generate(request)).start.model == "other"
        assert (await client.describe(60))[0].model == "other"

    try:
        asyncio.run(scenario())
    finally:
        serve.delete(APP)

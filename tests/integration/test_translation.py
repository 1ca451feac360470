"""Translation on real Ray Serve: the 503 of the shared app (no model), and a Translation deployment with a tiny
NLLB model in the same cluster (``@serve.batch`` in a replica, hot reload through ``user_config``)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytestmark = pytest.mark.integration
APP = "translation-under-test"


def test_no_model_answers_503_and_models_says_not_installed(serve_url, make_token):
    headers = {"X-CLIENT-TOKEN": make_token("translation-integration")}
    r = httpx.post(
        f"{serve_url}/api/v1/translate/process",
        headers=headers,
        timeout=60,
        json={"input_text": "Sawubona", "source_lang": "zul_Latn", "target_lang": "eng_Latn"},
    )
    assert r.status_code == 503
    assert "khuluma models pull facebook/nllb-200-distilled-600M" in r.json()["detail"]
    r = httpx.post(
        f"{serve_url}/api/v1/translate/process",
        headers=headers,
        timeout=60,
        json={"input_text": "Sawubona", "source_lang": "zul", "target_lang": "eng_Latn"},
    )
    assert r.status_code == 400  # validation answers before the model is needed
    models = httpx.get(f"{serve_url}/api/v1/models", headers=headers, timeout=60).json()["capabilities"]
    [entry] = [c for c in models if c["capability"] == "translation"]
    assert entry["installed"] is False and "khuluma models pull" in entry["note"]


def test_serve_deployment_batches_and_hot_reloads(serve_url, settings, tiny_nllb):
    from ray import serve

    from contracts.translation import TranslationClient, TranslationRequest
    from deployments.translation import Translation
    from engines.translation.nllb import NLLBTranslator
    from engines.translation.translator import DecodeOptions
    from scripts.bench._tiny_models import training_lines

    bound = settings.updated({"translation": {"max_length": 12, "compute_type": "float32"}}).for_replica(
        ("translation",)
    )
    deployment = serve.deployment(Translation, name="TranslationUnderTest").options(
        user_config={"model": str(tiny_nllb.ct2_f32)}, ray_actor_options={"num_cpus": 0.1}
    )
    # A fixed code version makes the user_config change below a light update: Serve calls `reconfigure` on the
    # live replica (as `serve deploy` with an edited serve.yaml does) instead of starting a new one.
    deployment._version = "translation-under-test"
    requests = [
        (line, "zul_Latn", tgt)
        for line, tgt in zip(training_lines(24, seed=13), ["xho_Latn", "afr_Latn", "eng_Latn"] * 8, strict=True)
    ]
    typed = [TranslationRequest(text=text, source=src, target=tgt) for text, src, tgt in requests]

    def expected(path) -> list[str]:
        engine = NLLBTranslator(path, options=DecodeOptions(beam_size=2, max_length=12), compute_type="float32")
        return [o.text for o in engine.translate_batch(requests)]

    old, new = expected(tiny_nllb.ct2_f32), expected(tiny_nllb.other_ct2_f32)
    assert new != old

    def deploy(model) -> TranslationClient:
        handle = serve.run(
            deployment.options(user_config={"model": str(model)}).bind(bound), name=APP, route_prefix=None
        )
        return TranslationClient(handle)

    async def scenario() -> None:  # handles route from an event loop
        client = await asyncio.to_thread(deploy, tiny_nllb.ct2_f32)
        results = await asyncio.gather(*(client.translate_detailed(r) for r in typed))  # @serve.batch
        assert [r.translated_text for r in results] == old
        assert [r.segments[0].tokens[0] for r in results] == [tgt for _, _, tgt in requests]

        in_flight = [asyncio.ensure_future(client.translate_detailed(r)) for r in typed]
        client = await asyncio.to_thread(deploy, tiny_nllb.other_ct2_f32)  # hot reload while requests run
        for i, r in enumerate(await asyncio.gather(*in_flight)):  # none dropped; answered by the model batching it
            assert r.translated_text == (old if r.model == "ct2-f32" else new)[i]
        after = await asyncio.gather(*(client.translate_detailed(r) for r in typed[:6]))
        assert [r.model for r in after] == ["other-ct2-f32"] * 6
        assert [r.translated_text for r in after] == new[:6]
        assert (await client.describe(60))[0].model == "other-ct2-f32"

    async def run() -> None:
        try:
            await scenario()
        finally:
            await asyncio.to_thread(serve.delete, APP)
            controller = serve.context._get_global_client()  # drop the handles bound to this loop before it closes
            assert controller is not None
            for key in [k for k in controller.handle_cache if k[1] == APP]:
                await controller.handle_cache.pop(key).shutdown_async()

    asyncio.run(run())

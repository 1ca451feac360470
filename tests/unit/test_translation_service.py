"""Translation through the real deployment class and the FastAPI routes (Serve's local testing mode, no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.errors import InvalidInput, Unavailable
from contracts.languages import TRANSLATION_NLLB_CODES as LANGUAGES
from contracts.translation import TranslationRequest
from deployments.translation import Translation
from engines.translation.nllb import NLLBTranslator
from engines.translation.translator import DecodeOptions, Translator
from scripts.bench._tiny_models import training_lines

URL = "/api/v1/translate/process"
INSTALL = "khuluma models pull facebook/nllb-200-distilled-600M"


def _deployment(settings, **translation: Any) -> Translation:
    """The deployment class itself, in this process (its @batched methods group concurrent calls here too)."""
    s = settings.updated({"translation": {"max_length": 12, "compute_type": "float32", **translation}})
    return Translation(s.for_replica(("translation",)))


def _request(text: str, source: str, target: str) -> TranslationRequest:
    return TranslationRequest(text=text, source=source, target=target)


def _engine(path) -> NLLBTranslator:
    return NLLBTranslator(path, options=DecodeOptions(beam_size=2, max_length=12), compute_type="float32")


def _loaded(deployment: Translation) -> Translator:
    assert deployment.engine is not None, deployment.load_error
    return deployment.engine


# ------------------------------------------------------------------------------------------ no model


@pytest.mark.parametrize("deployed", [True, False], ids=["deployed", "not-deployed"])
def test_without_a_model_the_route_answers_503_with_install_instructions(local_app, make_token, deployed):
    """The same answer whether the Translation deployment runs without a model (translation.deploy always) or,
    as by default, is not deployed and the ingress answers for it."""
    client = local_app(capabilities=["translation"] if deployed else ["text"])
    headers = {"X-CLIENT-TOKEN": make_token()}
    r = client.post(
        URL, headers=headers, json={"input_text": "Sawubona", "source_lang": "zul_Latn", "target_lang": "eng_Latn"}
    )
    assert r.status_code == 503
    assert INSTALL in r.json()["detail"] and "KHULUMA_TRANSLATION_MODEL" in r.json()["detail"]
    models = client.get("/api/v1/models", headers=headers).json()["capabilities"]
    [entry] = [c for c in models if c["capability"] == "translation"]
    assert entry["installed"] is False and INSTALL in entry["note"]
    assert {lang["code"] for lang in entry["languages"]} == set(LANGUAGES)


def test_translation_is_deployed_only_with_a_model_unless_always(settings):
    from khuluma.app import default_capabilities, deployment_names

    assert "translation" not in default_capabilities(settings) and "Translation" not in deployment_names(settings)
    with_model = settings.updated({"translation": {"model": "nllb-200-distilled-600M"}})
    assert "translation" in default_capabilities(with_model)
    assert "translation" in default_capabilities(settings, {"Translation": {"user_config": {"model": "nllb"}}})
    assert "translation" not in default_capabilities(settings, {"Translation": {"user_config": {"model": None}}})
    always = settings.updated({"translation": {"deploy": "always"}})
    assert "translation" in default_capabilities(always) and "Translation" in deployment_names(always)


def test_a_model_that_cannot_be_loaded_is_reported(settings):
    deployment = _deployment(settings, model="facebook/nllb-200-distilled-600M")
    with pytest.raises(Unavailable, match="khuluma models pull facebook/nllb-200-distilled-600M"):
        asyncio.run(deployment.translate(_request("Sawubona", "zul_Latn", "eng_Latn")))
    [entry] = deployment.describe()
    assert entry.installed is False and entry.note and "not installed" in entry.note


# ------------------------------------------------------------------------------------------ routes


def test_route_translates_and_validates(local_app, make_token, tiny_nllb):
    client = local_app(["translation"], translation={"model": str(tiny_nllb.ct2), "max_length": 12})
    headers = {"X-CLIENT-TOKEN": make_token()}

    def post(text: str, src: str = "zul_Latn", tgt: str = "xho_Latn"):
        return client.post(URL, headers=headers, json={"input_text": text, "source_lang": src, "target_lang": tgt})

    r = post("Sawubona umuntu omkhulu. Ngiyabonga!")
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["id"]) == 36 and body["translation"][0]["translated_text"].strip()
    expected = (
        NLLBTranslator(tiny_nllb.ct2, options=DecodeOptions(max_length=12))
        .translate_batch([("Sawubona umuntu omkhulu. Ngiyabonga!", "zul_Latn", "xho_Latn")])[0]
        .text
    )
    assert body["translation"][0]["translated_text"] == expected
    assert post("Sawubona", tgt="zul_Latn").json()["translation"][0]["translated_text"] == "Sawubona"
    bad = post("Sawubona", src="zu")
    assert bad.status_code == 400 and "source_lang" in bad.json()["detail"] and "nso_Latn" in bad.json()["detail"]
    assert post("Sawubona", tgt="fra_Latn").status_code == 400  # NLLB has it, the API does not
    too_long = post(" ".join(["igama"] * 257))
    assert too_long.status_code == 400 and "256" in too_long.json()["detail"]
    assert post("   ").status_code == 400
    models = client.get("/api/v1/models", headers=headers).json()["capabilities"]
    [entry] = [c for c in models if c["capability"] == "translation"]
    assert entry["installed"] is True and entry["model"] == "ct2" and entry["backend"] == "ctranslate2"
    assert all(lang["supported"] for lang in entry["languages"])


# ------------------------------------------------------------------------------------------ deployment


def test_concurrent_requests_are_batched_and_answered_in_order(settings, tiny_nllb):
    deployment = _deployment(settings, model=str(tiny_nllb.ct2_f32))
    codes = list(LANGUAGES)
    requests = [(line, codes[i % 11], codes[(i * 7 + 3) % 11]) for i, line in enumerate(training_lines(48, 21))]
    requests = [r for r in requests if r[1] != r[2]]
    calls: list[int] = []
    engine = _loaded(deployment)
    original = engine.translate_batch

    def counting(batch):  # a spy on the real engine: records batch sizes, translates for real
        calls.append(len(batch))
        return original(batch)

    engine.translate_batch = counting  # type: ignore[method-assign]

    async def run():
        return await asyncio.gather(*(deployment.translate_detailed(_request(*r)) for r in requests))

    results = asyncio.run(run())
    expected = _engine(tiny_nllb.ct2_f32).translate_batch(requests)
    assert [r.translated_text for r in results] == [e.text for e in expected]
    assert [r.segments[0].tokens[0] for r in results] == [tgt for _, _, tgt in requests]
    assert sum(calls) == len(requests) and len(calls) < len(requests) / 4  # grouped into few model calls


def test_unsupported_language_in_the_model_is_a_400(settings, tiny_nllb):
    deployment = _deployment(settings, model=str(tiny_nllb.ct2))
    with pytest.raises(InvalidInput, match="abc_Latn"):
        asyncio.run(deployment.translate(_request("hello", "eng_Latn", "abc_Latn")))


def test_hot_reload_swaps_models_without_dropping_requests(settings, tiny_nllb):
    deployment = _deployment(settings, model=str(tiny_nllb.ct2_f32))
    texts = [(line, "zul_Latn", "xho_Latn") for line in training_lines(64, seed=5)]
    first = {r.text for r in _engine(tiny_nllb.ct2_f32).translate_batch(texts)}
    second_outputs = _engine(tiny_nllb.other_ct2_f32).translate_batch(texts)

    async def run():
        before = [asyncio.ensure_future(deployment.translate_detailed(_request(*t))) for t in texts]
        await asyncio.sleep(0)  # the first batch is queued on the old model
        await deployment.reconfigure({"model": str(tiny_nllb.other_ct2_f32)})
        after = await asyncio.gather(*(deployment.translate_detailed(_request(*t)) for t in texts))
        return await asyncio.gather(*before), after

    before, after = asyncio.run(run())
    assert len(before) == len(texts)  # none dropped, each answered by the model it was batched on
    for result in before:
        assert result.model in ("ct2-f32", "other-ct2-f32")
        if result.model == "ct2-f32":
            assert result.translated_text in first
    assert {r.model for r in after} == {"other-ct2-f32"}
    assert [r.translated_text for r in after] == [o.text for o in second_outputs]
    assert {o.text for o in second_outputs} != first  # the two models really differ
    assert deployment.describe()[0].model == "other-ct2-f32"

    # a bad model keeps the current one serving and says why; `model: null` goes back to the setting
    asyncio.run(deployment.reconfigure({"model": "no-such-model"}))
    [entry] = deployment.describe()
    assert entry.installed is True and entry.note and "no-such-model" in entry.note
    assert asyncio.run(deployment.translate(_request(*texts[0]))) == second_outputs[0].text
    asyncio.run(deployment.reconfigure({"model": None}))
    [entry] = deployment.describe()
    assert entry.model == "ct2-f32" and entry.note and "failed" not in entry.note
    assert asyncio.run(deployment.translate(_request(*texts[0]))) in first


def test_decoding_options_from_user_config(settings, tiny_nllb):
    deployment = _deployment(settings, model=str(tiny_nllb.ct2))
    engine = _loaded(deployment)
    asyncio.run(deployment.reconfigure({"model": None, "beam_size": 1, "max_length": 5}))
    assert deployment.engine is engine and engine.options.beam_size == 1  # same model: no reload
    [result] = engine.translate_batch([("Sawubona umuntu omkhulu", "zul_Latn", "eng_Latn")])
    assert len(result.segments[0].tokens) <= 5

"""Text analysis through the real Ray Serve application (batched deployments, handles, ingress)."""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest

from tests.admitted import post_admitted

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def headers(make_token):
    return {"X-CLIENT-TOKEN": make_token("text-integration")}


def test_concurrent_text_requests_through_serve(serve_url, headers):
    texts = [f"Thandi Nkosi moved to Durban in {2000 + i}. She is very happy there!" for i in range(12)]

    def ner(text: str) -> tuple[str, list[dict]]:
        r = post_admitted(
            f"{serve_url}/api/v1/entity_recognition/process", json={"encoded_text": text}, headers=headers, timeout=120
        )
        assert r.status_code == 200, r.text
        return text, r.json()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # concurrent calls share @serve.batch batches
        for text, ents in pool.map(ner, texts):
            assert ents and all(text[e["start"] : e["end"]] == e["word"] for e in ents)
            assert ("location", "Durban") in [(e["entity"], e["word"]) for e in ents]

    r = httpx.post(
        f"{serve_url}/api/v1/sentiment_analysis/process",
        headers=headers,
        timeout=120,
        json={"encoded_text": "Ngijabule kakhulu namuhla. Ukudla bekubi kakhulu futhi ngithukuthele."},
    )
    assert r.status_code == 200, r.text
    assert [s["text"] for s in r.json()["Sentiments"]] == [
        "Ngijabule kakhulu namuhla",
        " Ukudla bekubi kakhulu futhi ngithukuthele",
    ]


def test_classify_and_language_detect_through_serve(serve_url, headers):
    examples = [
        {"intent": "balance", "example": "Ngimalini esikhwameni sami?"},
        {"intent": "balance", "example": "Ngifuna ukubona ibhalansi yami"},
        {"intent": "greeting", "example": "Sawubona"},
        {"intent": "greeting", "example": "Sanibonani nonke"},
    ]
    r = httpx.post(
        f"{serve_url}/api/v1/classify",
        headers=headers,
        timeout=120,
        json={"examples": examples, "inputs": ["Ngicela ibhalansi ye-akhawunti yami", "Sawubona mngane"]},
    )
    assert r.status_code == 200, r.text
    tops = [max(res["probabilities"], key=lambda p: p["score"])["intent"] for res in r.json()]
    assert tops == ["balance", "greeting"]

    r = httpx.post(
        f"{serve_url}/api/v1/language/detect",
        headers=headers,
        timeout=120,
        json={"text": "Bonkhe bantfu batalwa bakhululekile balingana ngesitfunti nangemalungelo."},
    )
    assert r.status_code == 200, r.text
    assert r.json()["language"] == "ssw"
    r = httpx.post(
        f"{serve_url}/api/v1/entity_recognition/process", headers=headers, timeout=60, json={"encoded_text": ""}
    )
    assert r.status_code == 400

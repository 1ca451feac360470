"""Knowledge bases through the real Ray Serve application (Ingress -> Search, its embedder in-process)."""

from __future__ import annotations

import concurrent.futures
import uuid

import httpx
import pytest

from tests.admitted import post_admitted

pytestmark = pytest.mark.integration

KB = "/api/v1/search/knowledgebase"
DOCS = {
    "clinic.txt": "Soshanguve Block X Clinic is open from Monday to Friday, 07:30 to 19:00. "
    "The facility manager is Dr Pieter Venter.",
    "water.md": "# Notice\n\nWard 23 (Chatsworth) will have no water on 21 May from 08:00 to 15:00 while the Bayview "
    "reservoir is cleaned.",
    "udoti.txt": "Udoti uqoqwa eWadini 45 njalo ngoLwesithathu ngaphambi kuka-06:30 ekuseni.",
}


def test_knowledge_base_lifecycle_through_serve(serve_url, make_token):
    tag = uuid.uuid4().hex[:6]
    alice = {"X-CLIENT-TOKEN": make_token(f"search-int-alice-{tag}")}
    bob = {"X-CLIENT-TOKEN": make_token(f"search-int-bob-{tag}")}
    with httpx.Client(base_url=serve_url, timeout=300) as client:
        created = client.post(KB, headers=alice, json={"knowledgebase_name": "notices"})
        assert created.status_code == 200, created.text
        kb_id = created.json()["id"]

        def upload(item: tuple[str, str]) -> dict:
            name, text = item
            r = post_admitted(
                f"{serve_url}{KB}/{kb_id}/document",
                headers=alice,
                timeout=300,
                files={"file": (name, text.encode(), "text/plain")},
            )
            assert r.status_code == 200, r.text
            return r.json()

        with concurrent.futures.ThreadPoolExecutor(3) as pool:  # concurrent uploads: one writer serialises them
            docs = {d["filename"]: d for d in pool.map(upload, DOCS.items())}
        assert set(docs) == set(DOCS)

        listed = client.get(f"{KB}s", headers=alice).json()
        assert {d["filename"] for d in next(k for k in listed if k["id"] == kb_id)["documents"]} == set(DOCS)

        hits = client.post(
            f"{KB}/{kb_id}/query",
            headers=alice,
            json={"query": "Amanzi azonqamuka nini eChatsworth?", "language": "zu_ZA"},
        )
        assert hits.status_code == 200, hits.text
        results = hits.json()["search_result"]
        assert results[0]["filename"] == "water.md"
        assert all(a["score"] >= b["score"] for a, b in zip(results, results[1:]))

        assert client.post(f"{KB}/{kb_id}/query", headers=bob, json={"query": "water"}).status_code == 404
        assert client.delete(f"{KB}/document/{docs['water.md']['id']}", headers=bob).status_code == 404

        assert client.delete(f"{KB}/document/{docs['water.md']['id']}", headers=alice).status_code == 200
        after = client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "Chatsworth water", "top_k": 10})
        assert docs["water.md"]["id"] not in {r["document_id"] for r in after.json()["search_result"]}

        models = client.get("/api/v1/models", headers=alice).json()
        search = next(c for c in models["capabilities"] if c["capability"] == "knowledge_base_search")
        assert search["installed"] and "chromadb" in search["backend"]

        assert client.delete(f"{KB}/{kb_id}", headers=alice).status_code == 200
        assert client.get(f"{KB}/{kb_id}/documents", headers=alice).status_code == 404
        # a deleted knowledge base is gone for queries at once, for its owner and for anyone else
        for caller in (alice, bob):
            gone = client.post(f"{KB}/{kb_id}/query", headers=caller, json={"query": "Chatsworth water"})
            assert gone.status_code == 404, gone.text

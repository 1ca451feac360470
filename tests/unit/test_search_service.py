"""Knowledge-base routes through the ingress, with the Search deployment (its embedder in-process, the
default) in Serve's local testing mode (no Ray cluster)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from contracts.settings import Settings
from khuluma.app import build_local
from persistence.models import Document, KnowledgeBase
from tests.conftest import client_for

KB = "/api/v1/search/knowledgebase"

CLINIC = (
    "Soshanguve Block X Clinic is open from Monday to Friday, 07:30 to 19:00, and is closed on weekends. "
    "The facility manager is Dr Pieter Venter. Antenatal visits are on Tuesdays and Thursdays."
)
WATER = (
    "Water interruption notice: Ward 23 (Chatsworth) will have no water on 21 May from 08:00 to 15:00 while "
    "the Bayview reservoir is cleaned. Residents should store water the night before."
)
ZULU = (
    "Umtholampilo wase-KwaMashu uvulwa ngoMsombuluko kuya ngoLwesihlanu kusukela ngo-07:00 kuya ku-16:00. "
    "Umphathi wesikhungo ngu-Sister Thandeka Mthembu."
)


class StoreView:
    """What the Search deployment itself holds, asked through its handle."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def count(self, kb_id: str, document_id: str | None = None) -> int:
        return self.handle.count.remote(kb_id, document_id).result()

    def exists(self, kb_id: str) -> bool:
        return self.handle.exists.remote(kb_id).result()


@pytest.fixture()
def knowledge_app(settings: Settings, tmp_path: Path) -> Iterator[Any]:
    """A factory of (client, store view) over Search; ``search`` settings may be changed."""
    opened: list[Any] = []

    def make(**search: Any) -> tuple[Any, StoreView]:
        s = settings.updated({"search": {"chroma_path": tmp_path / "chroma", **search}})
        handles = build_local(s, ["search"])
        opened.append(handles["search"])
        return client_for(s, handles), StoreView(handles["search"])

    yield make
    for handle in opened:
        handle.close.remote().result()


@pytest.fixture()
def app(knowledge_app):
    """(client, knowledge store): the vector store itself is inspected after deletes."""
    return knowledge_app()


@pytest.fixture()
def tokens(make_token):
    tag = uuid.uuid4().hex[:8]
    return ({"X-CLIENT-TOKEN": make_token(f"kb-alice-{tag}")}, {"X-CLIENT-TOKEN": make_token(f"kb-bob-{tag}")})


def upload(client, headers, kb_id: str, name: str, content: bytes, mime: str = "text/plain"):
    return client.post(f"{KB}/{kb_id}/document", headers=headers, files={"file": (name, io.BytesIO(content), mime)})


def create(client, headers, name: str = "clinics") -> str:
    response = client.post(KB, headers=headers, json={"knowledgebase_name": name})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["knowledgebase_name"] == name and uuid.UUID(body["id"])
    return body["id"]


def test_full_flow_upload_list_query_delete(app, tokens, db) -> None:
    import docx

    client, store = app
    alice, _ = tokens
    kb_id = create(client, alice)
    first = upload(client, alice, kb_id, "clinic.txt", CLINIC.encode())
    assert first.status_code == 200, first.text
    doc = first.json()
    assert doc["knowledgebase_id"] == kb_id and doc["filename"] == "clinic.txt" and doc["duplicate"] is False

    word = docx.Document()
    word.add_paragraph(WATER)
    buffer = io.BytesIO()
    word.save(buffer)
    second = upload(
        client,
        alice,
        kb_id,
        "../../etc/water notice?.docx",
        buffer.getvalue(),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    )
    assert second.status_code == 200, second.text
    assert second.json()["filename"] == "water notice_.docx"  # sanitised: no path, no odd characters
    html = f"<html><body><h1>KwaMashu</h1><p>{ZULU}</p></body></html>".encode()
    assert upload(client, alice, kb_id, "kwamashu.html", html, "text/html").status_code == 200

    listed = client.get(f"{KB}s", headers=alice).json()
    mine = next(kb for kb in listed if kb["id"] == kb_id)
    assert mine["knowledgebase_name"] == "clinics"
    assert {d["filename"] for d in mine["documents"]} == {"clinic.txt", "water notice_.docx", "kwamashu.html"}
    documents = client.get(f"{KB}/{kb_id}/documents", headers=alice).json()
    assert len(documents) == 3 and all(d["knowledgebase_id"] == kb_id for d in documents)

    answer = client.post(
        f"{KB}/{kb_id}/query", headers=alice, json={"query": "When will Chatsworth have no water?", "language": "en_ZA"}
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["search_result"]
    assert results and results[0]["filename"] == "water notice_.docx" and "Bayview reservoir" in results[0]["text"]
    assert all(a["score"] >= b["score"] for a, b in zip(results, results[1:]))
    assert set(results[0]) >= {"text", "score", "document_id", "filename"}

    # cross-lingual: an isiZulu question finds the English passage
    zulu_q = client.post(
        f"{KB}/{kb_id}/query", headers=alice, json={"query": "Amanzi azonqamuka nini eChatsworth?", "language": None}
    )
    assert zulu_q.json()["search_result"][0]["document_id"] == second.json()["id"]
    top1 = client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "clinic", "language": None, "top_k": 1})
    assert len(top1.json()["search_result"]) == 1

    # delete one document: its vectors go, the others stay
    before = store.count(kb_id)
    removed = client.delete(f"{KB}/document/{doc['id']}", headers=alice)
    assert removed.status_code == 200 and removed.json()["id"] == doc["id"]
    assert store.count(kb_id, doc["id"]) == 0 and 0 < store.count(kb_id) < before
    after = client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "Pieter Venter clinic manager"})
    assert doc["id"] not in {r["document_id"] for r in after.json()["search_result"]}
    assert client.delete(f"{KB}/document/{doc['id']}", headers=alice).status_code == 404

    # delete the knowledge base: rows and the whole collection go
    assert client.delete(f"{KB}/{kb_id}", headers=alice).status_code == 200
    assert not store.exists(kb_id) and store.count(kb_id) == 0
    with db.session() as s:
        assert s.get(KnowledgeBase, kb_id) is None
        assert not s.scalars(select(Document).where(Document.kb_id == kb_id)).all()
    assert client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "water"}).status_code == 404
    assert kb_id not in {kb["id"] for kb in client.get(f"{KB}s", headers=alice).json()}


def test_passages_of_a_document_still_indexing_are_not_answered(app, tokens, db) -> None:
    """The ownership check and the search run at once; passages of a document whose row is not ready yet are
    dropped."""
    client, _ = app
    alice, _ = tokens
    kb_id = create(client, alice)
    clinic = upload(client, alice, kb_id, "clinic.txt", CLINIC.encode()).json()["id"]
    water = upload(client, alice, kb_id, "water.txt", WATER.encode()).json()["id"]

    def answered(top_k: int) -> list[str]:
        body = {"query": "clinic manager water supply", "top_k": top_k}
        response = client.post(f"{KB}/{kb_id}/query", headers=alice, json=body)
        assert response.status_code == 200, response.text
        return [r["document_id"] for r in response.json()["search_result"]]

    assert {clinic, water} <= set(answered(5))
    with db.session() as s:
        s.get(Document, water).status = "indexing"
    assert answered(2) == [clinic]  # the clinic notice is one passage; the water notice's are held back
    with db.session() as s:
        s.get(Document, water).status = "ready"
    assert water in answered(5)


def test_other_customers_get_404_and_see_nothing(app, tokens) -> None:
    client, store = app
    alice, bob = tokens
    kb_id = create(client, alice, "private")
    doc_id = upload(client, alice, kb_id, "water.txt", WATER.encode()).json()["id"]

    assert client.get(f"{KB}s", headers=bob).json() == []
    assert client.get(f"{KB}/{kb_id}/documents", headers=bob).status_code == 404
    assert client.post(f"{KB}/{kb_id}/query", headers=bob, json={"query": "water"}).status_code == 404
    assert upload(client, bob, kb_id, "evil.txt", b"Injected text.").status_code == 404
    assert client.delete(f"{KB}/document/{doc_id}", headers=bob).status_code == 404
    assert client.delete(f"{KB}/{kb_id}", headers=bob).status_code == 404
    assert client.get(f"{KB}/{uuid.uuid4()}/documents", headers=bob).json()["detail"] == "Knowledge base not found."
    # nothing was touched
    assert store.count(kb_id, doc_id) >= 1
    assert [d["id"] for d in client.get(f"{KB}/{kb_id}/documents", headers=alice).json()] == [doc_id]
    # bob's own knowledge base with the same text is separate
    bob_kb = create(client, bob, "private")
    upload(client, bob, bob_kb, "water.txt", WATER.encode())
    bob_hits = client.post(f"{KB}/{bob_kb}/query", headers=bob, json={"query": "water"}).json()["search_result"]
    assert bob_hits and doc_id not in {h["document_id"] for h in bob_hits}


def test_same_file_twice_is_idempotent(app, tokens) -> None:
    client, store = app
    alice, _ = tokens
    kb_id = create(client, alice)
    first = upload(client, alice, kb_id, "clinic.txt", CLINIC.encode()).json()
    chunks = store.count(kb_id)
    again = upload(client, alice, kb_id, "clinic-copy.txt", CLINIC.encode())
    assert again.status_code == 200
    assert again.json() == {**first, "duplicate": True}
    assert store.count(kb_id) == chunks
    assert len(client.get(f"{KB}/{kb_id}/documents", headers=alice).json()) == 1
    other_kb = create(client, alice, "other")  # another knowledge base gets its own copy
    assert upload(client, alice, other_kb, "clinic.txt", CLINIC.encode()).json()["duplicate"] is False


def test_bad_uploads_and_queries(app, tokens, settings: Settings) -> None:
    client, store = app
    alice, _ = tokens
    kb_id = create(client, alice)
    unsupported = upload(client, alice, kb_id, "tool.exe", b"MZ\x90\x00binary", "application/octet-stream")
    assert unsupported.status_code == 415 and ".txt, .md, .pdf" in unsupported.json()["detail"]
    assert upload(client, alice, kb_id, "broken.pdf", b"%PDF-1.4 nonsense", "application/pdf").status_code == 415
    empty = upload(client, alice, kb_id, "empty.txt", b"   \n  ")
    assert empty.status_code == 400 and "no text" in empty.json()["detail"]
    no_file = client.post(
        f"{KB}/{kb_id}/document",
        headers=alice,
        data={"other": "x"},
        files={"notfile": ("a.txt", b"hello", "text/plain")},
    )
    assert no_file.status_code == 400 and "'file'" in no_file.json()["detail"]
    not_multipart = client.post(f"{KB}/{kb_id}/document", headers=alice, json={"file": "x"})
    assert not_multipart.status_code == 415
    assert client.get(f"{KB}/not-a-uuid/documents", headers=alice).status_code == 400
    assert client.post(KB, headers=alice, json={"knowledgebase_name": "  "}).status_code == 400
    assert client.post(KB, headers=alice, json={}).status_code == 400

    bad_language = client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "x", "language": "xx_YY"})
    assert bad_language.status_code == 400 and "'language'" in bad_language.json()["detail"]
    assert client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": " "}).status_code == 400
    assert client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "x", "top_k": 0}).status_code == 400
    for language in ("zu_ZA", "zul", "zul_Latn", "zu", "isiZulu", None):
        response = client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "x", "language": language})
        assert response.status_code == 200 and response.json() == {"search_result": []}
    assert store.count(kb_id) == 0  # nothing from the failed uploads reached the vector store
    assert client.get(f"{KB}/{kb_id}/documents", headers=alice).json() == []
    assert not list((settings.data_dir / "uploads" / "documents").glob("up-*"))  # no spooled files


def test_upload_over_the_limit_is_413(knowledge_app, make_token) -> None:
    client, _ = knowledge_app(max_document_mb=0.01)
    headers = {"X-CLIENT-TOKEN": make_token(f"kb-limit-{uuid.uuid4().hex[:6]}")}
    kb_id = create(client, headers)
    big = upload(client, headers, kb_id, "big.txt", b"Ward 17 water notice. " * 2000)
    assert big.status_code == 413 and "limit" in big.json()["detail"]
    assert upload(client, headers, kb_id, "small.txt", b"Ward 17 water notice.").status_code == 200


def test_strict_language_filters_and_items_carry_language(app, tokens) -> None:
    client, _ = app
    alice, _ = tokens
    kb_id = create(client, alice)
    upload(client, alice, kb_id, "en.txt", CLINIC.encode())
    upload(client, alice, kb_id, "zu.txt", ZULU.encode())
    both = client.post(f"{KB}/{kb_id}/query", headers=alice, json={"query": "clinic manager"}).json()
    assert {r["language"] for r in both["search_result"]} == {"eng", "zul"}
    only = client.post(
        f"{KB}/{kb_id}/query",
        headers=alice,
        json={"query": "clinic manager", "language": "zu_ZA", "strict_language": True},
    ).json()
    assert [r["filename"] for r in only["search_result"]] == ["zu.txt"]

"""Cluster mode: the Search deployment against a real Chroma server (``chroma run``) started by the test."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.payloads import Blob
from contracts.search import AddDocument, DocumentFile, SearchQuery
from contracts.settings import Settings
from engines.search.chunk_store import collection_name, connect_chroma
from khuluma.app import build_local
from tests.conftest import client_for
from tests.services import ChromaServer

KB = "/api/v1/search/knowledgebase"


@pytest.fixture()
def chroma_server(tmp_path: Path) -> Iterator[ChromaServer]:
    if not ChromaServer.available():
        pytest.fail("the chroma CLI (chromadb package) is not installed")
    server = ChromaServer(tmp_path / "chroma-server").start()
    yield server
    server.stop()


def test_service_on_a_chroma_server(settings: Settings, db, make_token, chroma_server: ChromaServer) -> None:
    s = settings.updated({"search": {"chroma_url": chroma_server.url}})
    handles = build_local(s, ["search"])
    client = client_for(s, handles)
    store = handles["search"]
    assert f"(server: {chroma_server.url})" in store.describe.remote().result()[0].backend  # not embedded
    headers = {"X-CLIENT-TOKEN": make_token(f"kb-cluster-{uuid.uuid4().hex[:6]}")}
    kb_id = client.post(KB, headers=headers, json={"knowledgebase_name": "cluster"}).json()["id"]

    def upload(name: str, text: str):  # type: ignore[no-untyped-def]
        return client.post(
            f"{KB}/{kb_id}/document", headers=headers, files={"file": (name, io.BytesIO(text.encode()), "text/plain")}
        )

    keep = upload("library.txt", "Tembisa Public Library is open Monday to Friday from 09:00 to 17:00.").json()
    drop = upload("refuse.txt", "Refuse is collected in Ward 17 every Tuesday before 06:30.").json()
    hits = client.post(f"{KB}/{kb_id}/query", headers=headers, json={"query": "When is refuse collected?"}).json()
    assert hits["search_result"][0]["document_id"] == drop["id"]

    # what the server itself holds, through a client of our own
    observer = connect_chroma(url=chroma_server.url)
    collection = observer.get_collection(collection_name(kb_id))
    assert collection.metadata["customer_id"] > 0
    assert len(collection.get(where={"document_id": drop["id"]})["ids"]) == 1

    assert client.delete(f"{KB}/document/{drop['id']}", headers=headers).status_code == 200
    assert collection.get(where={"document_id": drop["id"]})["ids"] == []
    assert len(collection.get(where={"document_id": keep["id"]})["ids"]) == 1

    # the vector store goes away: an upload fails with 503 and leaves no row behind
    chroma_server.stop()
    down = upload("later.txt", "Ward 9 has no water on 28 May.")
    assert down.status_code == 503, down.text
    assert "vector store" in down.json()["detail"]
    assert [d["id"] for d in client.get(f"{KB}/{kb_id}/documents", headers=headers).json()] == [keep["id"]]
    from sqlalchemy import select

    from persistence.models import Document

    with db.session() as session:
        assert session.scalars(select(Document.id).where(Document.kb_id == kb_id)).all() == [keep["id"]]
    chroma_server.start()  # same data directory and port
    collection = connect_chroma(url=chroma_server.url).get_collection(collection_name(kb_id))
    assert {m["document_id"] for m in collection.get()["metadatas"]} == {keep["id"]}

    assert client.delete(f"{KB}/{kb_id}", headers=headers).status_code == 200
    assert collection_name(kb_id) not in [c.name for c in connect_chroma(url=chroma_server.url).list_collections()]
    store.close.remote().result()


def test_two_replicas_share_the_server_without_stale_bm25(tmp_path: Path, chroma_server: ChromaServer) -> None:
    from deployments.search import Search

    settings = Settings(data_dir=tmp_path, search={"chroma_url": chroma_server.url}, _env_file=None)
    bound = settings.for_replica(("search", "embeddings"))
    embeddings = build_local(settings, ["embeddings"])["embeddings"]
    writer, reader = Search(bound, embeddings=embeddings), Search(bound, embeddings=embeddings)
    kb = str(uuid.uuid4())

    def document(doc_id: str, text: str) -> AddDocument:
        path = tmp_path / f"{doc_id}.txt"
        path.write_text(text, encoding="utf-8")
        return AddDocument(
            kb_id=kb,
            document_id=doc_id,
            customer_id=3,
            file=DocumentFile(content=Blob(data=path.read_bytes(), size=path.stat().st_size), filename=path.name),
        )

    def lexical(text: str) -> SearchQuery:
        return SearchQuery(kb_id=kb, text=text, top_k=5, mode="lexical")

    async def scenario() -> None:
        await writer.add_document(document("a", "Idas Vallei has no water on 19 May."))
        first = await reader.query(lexical("Idas Vallei"))
        assert [r.document_id for r in first] == ["a"]
        await writer.add_document(document("b", "Idas Vallei library lends six books."))
        second = await reader.query(lexical("Idas Vallei library"))
        assert second[0].document_id == "b"  # the reader's BM25 index followed the generation token
        await writer.delete_document(kb, "b")
        third = await reader.query(lexical("Idas Vallei library"))
        assert [r.document_id for r in third] == ["a"]

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
        reader.close()

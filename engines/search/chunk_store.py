"""The vector side of search: chunks of each knowledge base in their own Chroma collection.

One collection per knowledge base, named ``kb-<uuid hex>`` (cosine HNSW). Its metadata carries the owner's customer
id and a *generation* token that changes on every write: BM25 caches (``engines.search.bm25_cache.Bm25Cache``)
compare it, so several replicas on one Chroma server never serve stale text. Embeddings are always passed in:
Chroma's default embedding function is never used (so never downloaded).

Chroma is embedded (``PersistentClient``: one writing process per directory, see :func:`acquire_store_lock`) or
a server (``HttpClient``).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from engines.search.bm25_cache import Generation
from engines.search.fusion import Hit


def collection_name(kb_id: str) -> str:
    return f"kb-{uuid.UUID(str(kb_id)).hex}"


def chroma_settings() -> Any:
    from chromadb.config import Settings as ChromaSettings

    return ChromaSettings(anonymized_telemetry=False, allow_reset=False)


def connect_chroma(path: str | None = None, url: str | None = None) -> Any:
    """An embedded PersistentClient at ``path`` or an HttpClient for ``url`` (http[s]://host:port)."""
    import chromadb

    if url:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        ssl = parsed.scheme == "https"
        port = parsed.port or (443 if ssl else 8000)
        return chromadb.HttpClient(host=parsed.hostname or "localhost", port=port, ssl=ssl, settings=chroma_settings())
    if not path:
        raise ValueError("either a path or a url is needed")
    return chromadb.PersistentClient(path=str(path), settings=chroma_settings())


def _no_such_collection() -> tuple[type[Exception], ...]:
    """What Chroma raises for a collection that does not exist (any more): embedded, or over HTTP."""
    from chromadb.errors import NotFoundError

    return (NotFoundError, ValueError)


class OpenCollection:
    """A knowledge base's collection as one look-up found it: its owner and generation as of that look-up, and its
    chunks, read live on each call (none once the collection is deleted, as a look-up by name would find)."""

    def __init__(self, collection: Any) -> None:
        self._col = collection
        meta = collection.metadata or {}
        self.owner = int(meta.get("customer_id") or 0)
        self.generation = str(meta.get("generation"))

    def vector_search(
        self, embedding: np.ndarray, k: int, language: str | None = None, *, with_chunks: bool = True
    ) -> list[Hit]:
        """The ``k`` nearest chunks. ``with_chunks=False`` leaves out their text and metadata (empty in the hits),
        which Chroma's query otherwise spends most of its time fetching (docs/performance.md, figures behind the
        code)."""
        try:
            result = self._col.query(
                query_embeddings=np.asarray(embedding, dtype=np.float32).reshape(1, -1),
                n_results=k,
                where={"language": language} if language else None,
                include=["documents", "metadatas", "distances"] if with_chunks else ["distances"],
            )
        except _no_such_collection():  # deleted since the look-up
            return []
        ids, distances = result["ids"][0], result["distances"][0]
        texts = result["documents"][0] if with_chunks else [""] * len(ids)
        metas = result["metadatas"][0] if with_chunks else [{}] * len(ids)
        return [
            Hit(chunk_id, text or "", dict(meta or {}), similarity=1.0 - float(dist))
            for chunk_id, text, meta, dist in zip(ids, texts, metas, distances)
        ]

    def filled(self, hits: list[Hit], known: dict[str, tuple[str, dict[str, Any]]]) -> list[Hit]:
        """``hits`` with their texts and metadata: from ``known`` (what a lexical index read holds), else from the
        store (a chunk written after that index was read). A chunk gone from both is left out."""
        found = dict(known)
        missing = [hit.id for hit in hits if hit.id not in found]
        if missing:
            found.update(self.chunks(missing))
        filled = []
        for hit in hits:
            if hit.id in found:
                hit.text, hit.metadata = found[hit.id]
                filled.append(hit)
        return filled

    def chunks(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """Text and metadata of the given chunks (those that exist)."""
        if not ids:
            return {}
        try:
            got = self._col.get(ids=ids, include=["documents", "metadatas"])
        except _no_such_collection():  # deleted since the look-up
            return {}
        return {i: (t or "", dict(m or {})) for i, t, m in zip(got["ids"], got["documents"], got["metadatas"])}


class ChunkStore:
    """Chunks of each knowledge base in their own Chroma collection (vectors, text, metadata)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        try:
            self.max_batch = int(client.get_max_batch_size())
        except Exception:  # noqa: BLE001 - older servers
            self.max_batch = 1000
        self.max_batch = max(1, min(self.max_batch, 5000))

    def _collection(self, kb_id: str, create: bool = False, customer_id: int | None = None) -> Any:
        name = collection_name(kb_id)
        if create:
            return self.client.get_or_create_collection(
                name,
                embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"kb_id": str(kb_id), "customer_id": int(customer_id or 0), "generation": uuid.uuid4().hex},
            )
        try:
            return self.client.get_collection(name, embedding_function=None)
        except _no_such_collection():
            return None

    def open(self, kb_id: str) -> OpenCollection | None:
        """One read of a knowledge base's collection (None: it has none), for the several reads of one query: each
        look-up of a collection by name costs a store round trip (docs/performance.md, knowledge-base query)."""
        col = self._collection(kb_id)
        return None if col is None else OpenCollection(col)

    def owner(self, kb_id: str) -> int | None:
        opened = self.open(kb_id)
        return None if opened is None else opened.owner

    def generation(self, kb_id: str) -> str | None:
        opened = self.open(kb_id)
        return None if opened is None else opened.generation

    def _touch(self, col: Any) -> Generation:
        """New generation token; returns (previous, new)."""
        meta = dict(col.metadata or {})
        previous = meta.get("generation")
        meta["generation"] = uuid.uuid4().hex
        col.modify(metadata=meta)
        return (str(previous) if previous is not None else None), meta["generation"]

    def add(
        self,
        kb_id: str,
        customer_id: int | None,
        ids: list[str],
        embeddings: np.ndarray,
        texts: list[str],
        metadatas: list[dict[str, Any]],
    ) -> Generation:
        """Store chunks; returns the collection's (previous, new) generation."""
        col = self._collection(kb_id, create=True, customer_id=customer_id)
        try:
            for lo in range(0, len(ids), self.max_batch):
                hi = lo + self.max_batch
                col.add(
                    ids=ids[lo:hi],
                    embeddings=np.asarray(embeddings[lo:hi], dtype=np.float32),
                    documents=texts[lo:hi],
                    metadatas=metadatas[lo:hi],
                )
        except BaseException:
            self._touch(col)
            raise
        return self._touch(col)

    def delete_document(self, kb_id: str, document_id: str) -> tuple[int, Generation | None]:
        """Remove a document's chunks; returns (how many, the (previous, new) generation or None)."""
        col = self._collection(kb_id)
        if col is None:
            return 0, None
        before = col.count()
        col.delete(where={"document_id": document_id})
        change = self._touch(col)
        return before - col.count(), change

    def delete_kb(self, kb_id: str) -> bool:
        try:
            self.client.delete_collection(collection_name(kb_id))
            return True
        except _no_such_collection():
            return False

    def count(self, kb_id: str, document_id: str | None = None) -> int:
        col = self._collection(kb_id)
        if col is None:
            return 0
        if document_id is None:
            return int(col.count())
        return len(col.get(where={"document_id": document_id}, include=[])["ids"])

    def warm(self, kb_id: str) -> None:
        """Have the store read a collection's vector index now (embedded Chroma reads it on the first query:
        docs/performance.md, figures behind the code)."""
        col = self._collection(kb_id)
        if col is None:
            return
        first = col.get(limit=1, include=["embeddings"])
        if len(first["ids"]):
            col.query(query_embeddings=np.asarray(first["embeddings"][:1], dtype=np.float32), n_results=1)

    def exists(self, kb_id: str) -> bool:
        return self._collection(kb_id) is not None

    def vector_search(
        self, kb_id: str, embedding: np.ndarray, k: int, language: str | None = None, *, with_chunks: bool = True
    ) -> list[Hit]:
        """The ``k`` nearest chunks (:meth:`OpenCollection.vector_search`); none where the collection is missing."""
        opened = self.open(kb_id)
        return [] if opened is None else opened.vector_search(embedding, k, language, with_chunks=with_chunks)

    def all_chunks(self, kb_id: str, page: int = 5000) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        col = self._collection(kb_id)
        ids: list[str] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        if col is None:
            return ids, texts, metas
        offset = 0
        while True:
            got = col.get(include=["documents", "metadatas"], limit=page, offset=offset)
            ids += got["ids"]
            texts += [t or "" for t in got["documents"]]
            metas += [dict(m or {}) for m in got["metadatas"]]
            if len(got["ids"]) < page:
                return ids, texts, metas
            offset += page

    def list_collections(self) -> list[str]:
        return [c.name if hasattr(c, "name") else str(c) for c in self.client.list_collections()]


# --- one writer per embedded store ------------------------------------------------------------------------------
# Two processes writing one embedded store corrupt it. flock is per open file, so a process takes the lock once and
# counts its users (several stores of one process may share the directory).
_locks: dict[str, tuple[int, int]] = {}
_locks_guard = threading.Lock()


def acquire_store_lock(path: Path, wait_s: float = 30.0) -> None:
    """Exclusive (per process) ownership of an embedded store; waits ``wait_s`` for a predecessor to exit."""
    key = str(path.resolve())
    with _locks_guard:
        if key in _locks:
            fd, refs = _locks[key]
            _locks[key] = (fd, refs + 1)
            return
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / "khuluma-writer.lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
            os.close(fd)
            raise RuntimeError(
                f"Another process owns the embedded Chroma store at {path}. Only one Search replica may "
                "write an embedded store; run one replica, or set KHULUMA_SEARCH_CHROMA_URL to use a Chroma server."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        _locks[key] = (fd, 1)


def release_store_lock(path: Path) -> None:
    key = str(path.resolve())
    with _locks_guard:
        if key not in _locks:
            return
        fd, refs = _locks[key]
        if refs > 1:
            _locks[key] = (fd, refs - 1)
            return
        del _locks[key]
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

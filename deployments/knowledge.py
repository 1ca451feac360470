"""KnowledgeStore deployment: chunks, embeds, stores and searches knowledge-base documents on Chroma.

Single node: this deployment is the ONLY owner of the embedded Chroma ``PersistentClient`` under
``<data_dir>/chroma`` (or ``knowledge_chroma_path``). Two processes writing one embedded store corrupt it, so
the constructor takes an exclusive lock file there and refuses to start while another process holds it (run one
replica; ``configs/serve.yaml`` says ``num_replicas: 1``).
Cluster: with ``chroma_url`` set it talks to a Chroma server (``chroma run``) through ``chromadb.HttpClient`` and
may run several replicas (BM25 caches follow each collection's generation token, so replicas agree).

Layout: one Chroma collection per knowledge base (``kb-<uuid hex>``, cosine HNSW). Deleting a knowledge base
drops its collection; a query can only ever see one knowledge base's vectors; the collection records its owner's
customer id and queries that pass ``customer_id`` are checked against it (defence in depth behind the service's
own check). Each chunk: id ``<document_id>:<n>``, its text, and metadata ``document_id``, ``filename``,
``chunk_index``, ``start``, ``end`` (character offsets into the extracted text) and ``language`` (ISO 639-3,
detected at ingest; ``und`` when unsure).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from deployments.common import load_settings
from engines.chunking import Chunk, chunk_text
from engines.retrieval import (
    LANGUAGE_NAMES,
    Bm25Cache,
    ChunkStore,
    FusionConfig,
    Hit,
    connect_chroma,
    detect_languages,
    detectable_languages,
    dominant_language,
    fuse,
    normalise_language,
)
from serve_app.backends import as_backend
from contracts.errors import InvalidInput, NotFound, Unavailable

log = logging.getLogger("khuluma.knowledge")
UNDETERMINED = "und"
EMBED_BATCH = 32  # chunks per embedding call: bounded memory, and queries interleave with a long ingest

# --- one writer per embedded store (per process: flock is per open file, so the process shares one lock) ----
_locks: dict[str, tuple[int, int]] = {}
_locks_guard = threading.Lock()


def _acquire_store_lock(path: Path, wait_s: float = 30.0) -> None:
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
                f"Another process owns the embedded Chroma store at {path}. Only one KnowledgeStore replica may "
                "write an embedded store; run one replica, or set KHULUMA_CHROMA_URL to use a Chroma server."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        _locks[key] = (fd, 1)


def _release_store_lock(path: Path) -> None:
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


class _LocalEmbeddings:
    """The embeddings engine in-process, for a KnowledgeStore built without an Embeddings deployment."""

    def __init__(self, model: str | None) -> None:
        from engines.embeddings import load_embedder

        self.engine = load_embedder(model)

    def embed(self, texts: list[str], kind: str = "passage") -> np.ndarray:
        return self.engine.embed(texts, kind)  # type: ignore[arg-type]


class KnowledgeStore:
    def __init__(self, settings: dict[str, Any] | None = None, embeddings: Any = None) -> None:
        self.settings = load_settings(settings)
        s = self.settings
        self.embeddings = as_backend(embeddings if embeddings is not None else _LocalEmbeddings(s.embeddings.model),
                                     "embeddings")
        self.chunk_chars = s.search.chunk_chars
        self.chunk_overlap = s.search.chunk_overlap_chars
        self.hybrid = s.search.hybrid
        self.candidates = s.search.candidates
        self.fusion = FusionConfig(rrf_k=s.search.rrf_k, language_boost=s.search.language_boost)
        self._lock_path: Path | None = None
        if s.search.chroma_url:
            self.mode, self.location = "server", s.search.chroma_url
            client = connect_chroma(url=s.search.chroma_url)
        else:
            path = Path(s.search.chroma_path or (s.data_dir / "chroma"))
            _acquire_store_lock(path, s.search.lock_wait_seconds)
            self._lock_path = path
            self.mode, self.location = "embedded", str(path)
            try:
                client = connect_chroma(path=str(path))
            except BaseException:
                self.close()
                raise
        self.store = ChunkStore(client)
        # deltas of our own writes are exact only when we are the only writer (the embedded store)
        self.bm25 = Bm25Cache(self.store, max_entries=s.search.bm25_cache_kbs, exact_deltas=self.mode == "embedded")
        self._write_lock = asyncio.Lock()  # one writer at a time inside this replica

    def close(self) -> None:
        """Close the Chroma client (the embedded store stops with its last in-process user) and the lock."""
        if getattr(self, "store", None) is not None:
            try:
                self.store.client.close()
            except Exception:  # noqa: BLE001 - closing twice or an old client
                pass
            self.store = None  # type: ignore[assignment]
        if getattr(self, "_lock_path", None) is not None:
            _release_store_lock(self._lock_path)  # type: ignore[arg-type]
            self._lock_path = None

    def __del__(self) -> None:  # a replica that goes away frees the store for its successor
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # --- Serve plumbing ------------------------------------------------------------------------------------
    def ping(self) -> bool:
        self.store.client.heartbeat()
        return True

    def reconfigure(self, config: dict[str, Any]) -> None:
        """user_config keys: chunk_chars, chunk_overlap_chars, hybrid, candidates, rrf_k, lexical_weight,
        language_boost (missing keys keep their values)."""
        config = dict(config or {})
        self.chunk_chars = int(config.get("chunk_chars") or self.chunk_chars)
        self.chunk_overlap = int(config.get("chunk_overlap_chars", self.chunk_overlap))
        self.hybrid = bool(config.get("hybrid", self.hybrid))
        self.candidates = int(config.get("candidates") or self.candidates)
        self.fusion.rrf_k = float(config.get("rrf_k") or self.fusion.rrf_k)
        self.fusion.lexical_weight = float(config.get("lexical_weight", self.fusion.lexical_weight))
        self.fusion.language_boost = float(config.get("language_boost", self.fusion.language_boost))

    async def describe(self) -> list[dict[str, Any]]:
        model = None
        try:
            entries = await self.embeddings.call("describe")
            model = next((e.get("model") for e in entries if e.get("capability") == "embeddings"), None)
        except Exception:  # noqa: BLE001 - an in-process engine has no describe
            model = getattr(getattr(self.embeddings, "_target", None), "engine", None)
            model = getattr(model, "name", None)
        import chromadb

        detectable = set(await asyncio.to_thread(detectable_languages))
        languages = [{"code": code, "name": name, "supported": True, "model": model,
                      "note": None if code in detectable else
                      "Accepted as `language`, but not detected at ingest: no boost or filter effect."}
                     for code, name in LANGUAGE_NAMES.items()]
        return [{
            "capability": "knowledge_base_search", "installed": True, "model": model,
            "backend": f"chromadb {chromadb.__version__} ({self.mode}: {self.location}) + BM25 (bm25s), "
                       f"{'hybrid RRF' if self.hybrid else 'vector only'}",
            "languages": languages,
            "note": "Documents in any language the embedding model covers are searchable, also across languages "
                    "(an isiZulu question finds an English passage). `language` boosts (or with "
                    "strict_language filters) passages whose detected language matches.",
        }]

    # --- writes -----------------------------------------------------------------------------------------------
    async def add_document(self, kb_id: str, document_id: str, filename: str, text: str | None = None,
                           customer_id: int | None = None, path: str | None = None) -> dict[str, Any]:
        """Chunk, detect languages, embed and store one document. All or nothing: on failure its vectors go."""
        if text is None:
            if path is None:
                raise InvalidInput("add_document needs text or a path")
            from engines.documents import extract_text

            text = (await asyncio.to_thread(extract_text, Path(path), filename)).text
        chunks = await asyncio.to_thread(chunk_text, text, self.chunk_chars, self.chunk_overlap)
        if not chunks:
            raise InvalidInput(f"Field 'file': the document '{filename}' contains no text.")
        languages = await asyncio.to_thread(detect_languages, [c.text for c in chunks])
        try:
            vectors = []
            for lo in range(0, len(chunks), EMBED_BATCH):
                batch = [c.text for c in chunks[lo:lo + EMBED_BATCH]]
                vectors.append(np.asarray(await self.embeddings.call("embed", batch, "passage"), dtype=np.float32))
            embeddings = np.concatenate(vectors) if vectors else np.zeros((0, 384), dtype=np.float32)
            await self._write(kb_id, customer_id, document_id, filename, chunks, languages, embeddings)
        except BaseException:
            await self._undo(kb_id, document_id)
            raise
        sizes = [c.end - c.start for c in chunks]
        language = dominant_language(languages, sizes)
        return {"document_id": document_id, "chunks": len(chunks), "language": language or UNDETERMINED}

    async def add_precomputed(self, kb_id: str, document_id: str, filename: str, chunks: list[dict[str, Any]],
                              embeddings: np.ndarray, customer_id: int | None = None) -> dict[str, Any]:
        """Store chunks whose vectors were computed elsewhere (benchmarks, re-imports). ``chunks`` items:
        text, start, end and optionally language."""
        parsed = [Chunk(i, int(c.get("start", 0)), int(c.get("end", len(c["text"]))), c["text"])
                  for i, c in enumerate(chunks)]
        languages = [c.get("language") for c in chunks]
        if any(lang is None for lang in languages):
            languages = await asyncio.to_thread(detect_languages, [c.text for c in parsed])
        try:
            await self._write(kb_id, customer_id, document_id, filename, parsed, languages,
                              np.asarray(embeddings, dtype=np.float32))
        except BaseException:
            await self._undo(kb_id, document_id)
            raise
        return {"document_id": document_id, "chunks": len(parsed)}

    async def _write(self, kb_id: str, customer_id: int | None, document_id: str, filename: str,
                     chunks: list[Chunk], languages: list[str | None], embeddings: np.ndarray) -> None:
        if len(embeddings) != len(chunks):
            raise ValueError(f"{len(chunks)} chunks but {len(embeddings)} embeddings")
        ids = [f"{document_id}:{c.index}" for c in chunks]
        metadatas = [{"document_id": document_id, "filename": filename, "chunk_index": c.index, "start": c.start,
                      "end": c.end, "language": lang or UNDETERMINED} for c, lang in zip(chunks, languages)]
        texts = [c.text for c in chunks]
        def write() -> None:
            change = self.store.add(kb_id, customer_id, ids, embeddings, texts, metadatas)
            self.bm25.added(kb_id, change, ids, texts, metadatas)

        async with self._write_lock:
            await self._check_owner(kb_id, customer_id)
            task = asyncio.ensure_future(_store_call(write))
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:  # finish the write before anyone undoes it, then give up
                await asyncio.gather(task, return_exceptions=True)
                raise

    async def _undo(self, kb_id: str, document_id: str) -> None:
        try:
            await asyncio.shield(self.delete_document(kb_id, document_id))
        except Exception:  # noqa: BLE001 - report the original error, log this one
            log.exception("could not remove the vectors of failed document %s", document_id)

    async def delete_document(self, kb_id: str, document_id: str) -> int:
        """Remove a document's vectors; returns how many chunks were removed."""
        async with self._write_lock:
            removed, change = await _store_call(self.store.delete_document, kb_id, document_id)
            self.bm25.removed(kb_id, change, document_id)
        return removed

    async def delete_kb(self, kb_id: str) -> bool:
        async with self._write_lock:
            removed = await _store_call(self.store.delete_kb, kb_id)
        self.bm25.drop(kb_id)
        return removed

    # --- reads ------------------------------------------------------------------------------------------------
    async def _check_owner(self, kb_id: str, customer_id: int | None) -> None:
        if customer_id is None:
            return
        owner = await _store_call(self.store.owner, kb_id)
        if owner not in (None, 0, int(customer_id)):
            raise NotFound("Knowledge base not found.")

    async def query(self, kb_id: str, text: str, language: str | None = None, top_k: int = 5,
                    customer_id: int | None = None, strict_language: bool = False,
                    mode: str | None = None) -> list[dict[str, Any]]:
        """Best ``top_k`` chunks by descending score. ``mode``: hybrid | vector | lexical (default: config)."""
        if not text or not text.strip():
            raise InvalidInput("Field 'query' must not be empty.")
        try:
            lang = normalise_language(language)
        except ValueError as exc:
            raise InvalidInput(f"Field 'language': {exc}.") from None
        mode = mode or ("hybrid" if self.hybrid else "vector")
        if mode not in ("hybrid", "vector", "lexical"):
            raise InvalidInput("mode must be hybrid, vector or lexical")
        await self._check_owner(kb_id, customer_id)
        only = lang if strict_language else None
        pool = max(self.candidates, top_k * 4)

        async def by_meaning() -> list[Hit]:
            if mode not in ("hybrid", "vector"):
                return []
            vector = np.asarray(await self.embeddings.call("embed", [text], "query"), dtype=np.float32)[0]
            return await _store_call(self.store.vector_search, kb_id, vector, pool, only)

        async def by_words() -> list[Hit]:
            if mode not in ("hybrid", "lexical"):
                return []
            return await _store_call(self._lexical, kb_id, text, pool, only)

        vector_hits, lexical_hits = await asyncio.gather(by_meaning(), by_words())  # BM25 while embedding

        if mode == "vector":  # cosine similarity is the score; the language boost applies to it
            for hit in vector_hits:
                boost = 1.0 + self.fusion.language_boost if lang and hit.metadata.get("language") == lang else 1.0
                hit.score = round(float(hit.similarity or 0.0) * boost, 6)
            ranked = sorted(vector_hits, key=lambda h: -h.score)
        else:
            ranked = fuse(vector_hits, lexical_hits, self.fusion, lang)
        return [_result(hit) for hit in ranked[:top_k]]

    def _lexical(self, kb_id: str, text: str, k: int, language: str | None) -> list[Hit]:
        index = self.bm25.get(kb_id)
        return [Hit(chunk_id, chunk_text_, meta) for chunk_id, _, chunk_text_, meta in
                index.search_chunks(text, k, language)]

    def count(self, kb_id: str, document_id: str | None = None) -> int:
        """Chunks stored for a knowledge base (or one of its documents): what the vector store really holds."""
        return self.store.count(kb_id, document_id)

    def exists(self, kb_id: str) -> bool:
        return self.store.exists(kb_id)

    def collections(self) -> list[str]:
        return self.store.list_collections()


def _result(hit: Hit) -> dict[str, Any]:
    meta = hit.metadata
    return {"text": hit.text, "score": hit.score, "document_id": meta.get("document_id"),
            "filename": meta.get("filename"), "language": meta.get("language"),
            "chunk_index": meta.get("chunk_index"), "start": meta.get("start"), "end": meta.get("end")}


def _is_connection_error(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))


async def _store_call(fn: Any, *args: Any) -> Any:
    """Run a blocking vector-store call in a thread; a Chroma server that cannot be reached is a 503."""
    try:
        return await asyncio.to_thread(fn, *args)
    except Exception as exc:
        if _is_connection_error(exc):
            raise Unavailable(f"The vector store is unavailable ({type(exc).__name__}); try again.") from exc
        raise

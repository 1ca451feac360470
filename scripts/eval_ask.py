"""Refusal and faithfulness of the ask route, measured.

Two measures:

``--gate`` (offline, no language model, a minute): the refusal rule alone. The real Search deployment indexes the 54
passages of tests/data/retrieval (one document each); for each of its 59 answerable questions and the 21
unanswerable ones of tests/data/ask/unanswerable.jsonl (off-topic and near-topic, in English, isiZulu, Afrikaans and
Sesotho) it takes the best passage's similarity, as the ask route does, and counts, per threshold around
``llm.min_similarity``: answerable questions refused (false refusals) and unanswerable ones refused.

``--model NAME|DIR`` (real weights; an operator's run): the whole route. The repository's own docs (README.md and
docs/*.md) go into a knowledge base through the HTTP service (ingress, Search and LLM deployments under Serve's
local testing mode, in this process), and each question of tests/data/ask/docs_questions.jsonl is asked:

- answerable questions (``expect``: facts the docs state): answered (not refused), fact recall (every expected
  string in the answer), citation coverage (answer sentences that cite a source [n]) and support (cited sentences
  whose content words, by the BM25 tokenizer, are at least half in the passages they cite);
- unanswerable ones (``refuse``): refused ("I don't know from these documents.").

Usage::

    .venv/bin/python scripts/eval_ask.py --gate
    .venv/bin/python scripts/eval_ask.py --model qwen2.5-1.5b-instruct [--translation-model NAME] [--top-k 5]
        [--data-dir DIR]   # where `khuluma models pull` registered them (default: KHULUMA_DATA_DIR)
        [--json out.json] [--show]

The support measure is a lexical proxy (a sentence built from its passage's words); it cannot tell a paraphrase
that changes a number from a faithful one, so fact recall checks the numbers themselves. Figures go to
docs/search.md with the command that made them.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ASK = ROOT / "tests" / "data" / "ask"
SUPPORT = 0.5
_SENTENCE = re.compile(r"(?<=[.!?])(?:\s*\[\d+(?:\s*,\s*\d+)*\])*\s+")
_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- the refusal rule alone ------------------------------------------------------------------------------------------


def gate(work: Path, thresholds: list[float]) -> dict[str, Any]:
    from contracts.search import SearchQuery
    from contracts.settings import Settings
    from scripts.eval_retrieval import build, load_set

    passages, answerable = load_set()
    unanswerable = _lines(ASK / "unanswerable.jsonl")
    built = build(work, passages)

    async def best(questions: list[dict[str, Any]]) -> list[float]:
        out = []
        for q in questions:
            hits = await built.knowledge.passages(
                SearchQuery(kb_id=built.kb_id, text=q["query"], top_k=5, customer_id=1)
            )
            out.append(max((h.similarity or 0.0 for h in hits), default=0.0))
        return out

    try:
        yes, no = asyncio.run(best(answerable)), asyncio.run(best(unanswerable))
    finally:
        built.close()
    configured = Settings(_env_file=None).llm.min_similarity
    rows = []
    for t in sorted({*thresholds, configured}):
        by_kind: dict[str, list[bool]] = {}
        for q, s in zip(unanswerable, no):
            by_kind.setdefault(q["kind"], []).append(s < t)
        rows.append(
            {
                "threshold": t,
                "configured": t == configured,
                "false_refusals": sum(s < t for s in yes),
                "answerable": len(yes),
                "refused": sum(s < t for s in no),
                "unanswerable": len(no),
                **{f"refused_{k}": f"{sum(v)}/{len(v)}" for k, v in by_kind.items()},
            }
        )
    return {"rows": rows, "answerable_min": min(yes), "unanswerable_max": max(no)}


# --- the whole route -------------------------------------------------------------------------------------------------


def sentences(answer: str) -> list[str]:
    return [s for s in (p.strip() for p in _SENTENCE.split(answer)) if s]


def cited(sentence: str) -> set[int]:
    return {int(n) for group in _MARKER.findall(sentence) for n in group.split(",")}


def supported(sentence: str, passages: list[str]) -> bool:
    from engines.search.lexical import tokenize

    words = set(tokenize(_MARKER.sub(" ", sentence)))
    if not words:
        return True
    source = set(tokenize(" ".join(passages)))
    return len(words & source) / len(words) >= SUPPORT


def score(question: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    answer = body.get("answer", "")
    out: dict[str, Any] = {"id": question["id"], "refused": bool(body.get("refused")), "answer": answer}
    if question.get("refuse"):
        return out
    out["facts"] = all(f.lower() in answer.lower() for f in question["expect"])
    by_id = {c["id"]: c["text"] for c in body.get("citations", [])}
    found = sentences(answer) if not out["refused"] else []
    with_citation = [s for s in found if cited(s) & by_id.keys()]
    out["sentences"] = len(found)
    out["cited"] = len(with_citation)
    out["supported"] = sum(supported(s, [by_id[n] for n in cited(s) if n in by_id]) for s in with_citation)
    return out


def run_model(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from contracts.settings import Settings, get_settings
    from engines.models.registry import ModelRegistry
    from engines.models.resolve import resolve
    from khuluma.app import build_local
    from persistence.session import Database
    from serve_app.tokens import create_token

    registry = ModelRegistry(args.data_dir or get_settings().data_dir)
    model = resolve(registry, args.model, "llm")
    changes: dict[str, Any] = {"search": {"chroma_path": work / "chroma"}, "llm": {"model": model.path}}
    capabilities = ["search", "llm"]
    if args.translation_model:
        changes["translation"] = {"model": resolve(registry, args.translation_model, "translation").path}
        capabilities.append("translation")
    settings = Settings(data_dir=work, _env_file=None).updated(changes)
    headers = {"X-CLIENT-TOKEN": create_token(Database.migrated(settings.db_url), "eval")[0]}
    handles = build_local(settings, capabilities)
    client = _client(settings, handles)
    try:
        kb = client.post("/api/v1/search/knowledgebase", json={"knowledgebase_name": "docs"}, headers=headers)
        kb_id = kb.json()["id"]
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
            files = {"file": (doc.name, io.BytesIO(doc.read_bytes()), "text/markdown")}
            r = client.post(f"/api/v1/search/knowledgebase/{kb_id}/document", files=files, headers=headers)
            r.raise_for_status()
        results = []
        for q in _lines(ASK / "docs_questions.jsonl"):
            started = time.perf_counter()
            body = {"question": q["question"], "top_k": args.top_k, "lang": q.get("lang")}
            r = client.post(f"/api/v1/search/knowledgebase/{kb_id}/ask", json=body, headers=headers)
            r.raise_for_status()
            result = score(q, r.json()) | {"seconds": round(time.perf_counter() - started, 2)}
            results.append(result)
            if args.show:
                print(json.dumps(result, ensure_ascii=False), flush=True)
    finally:
        handles["search"].close.remote().result()
    return {"model": model.name, "results": results, "summary": summary(results)}


def _client(settings: Any, handles: dict[str, Any]) -> Any:
    """The ingress app over these deployment handles, called in this process (as the tests call it)."""
    from fastapi.testclient import TestClient

    from serve_app.app import create_app
    from serve_app.context import Clients, build_context, get_context

    context = build_context(settings, Clients.from_handles(settings, **handles))
    app = create_app(settings)
    app.dependency_overrides[get_context] = lambda: context
    return TestClient(app)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in results if "facts" in r]
    unanswerable = [r for r in results if "facts" not in r]
    sentences_ = sum(r["sentences"] for r in answerable)
    cited_ = sum(r["cited"] for r in answerable)
    return {
        "answerable": len(answerable),
        "answered": sum(not r["refused"] for r in answerable),
        "fact_recall": sum(r["facts"] for r in answerable),
        "citation_coverage": round(cited_ / sentences_, 3) if sentences_ else None,
        "support": round(sum(r["supported"] for r in answerable) / cited_, 3) if cited_ else None,
        "unanswerable": len(unanswerable),
        "refused": sum(r["refused"] for r in unanswerable),
        "mean_seconds": round(sum(r["seconds"] for r in results) / max(1, len(results)), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gate", action="store_true", help="The refusal rule alone (no language model).")
    ap.add_argument("--thresholds", default="0.77,0.78,0.79,0.8,0.81,0.82,0.83,0.84,0.85")
    ap.add_argument("--model", help="An installed language model (name or directory).")
    ap.add_argument("--translation-model", help="An installed translation model (the translate-test pipeline).")
    ap.add_argument("--data-dir", help="Data directory of the model registry (default: KHULUMA_DATA_DIR).")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--show", action="store_true", help="Print each question's result as it comes.")
    args = ap.parse_args()
    if not args.gate and not args.model:
        ap.error("give --gate or --model")
    work = Path(tempfile.mkdtemp(prefix="khuluma-eval-ask-"))
    report: dict[str, Any] = {}
    if args.gate:
        report["gate"] = gate(work / "gate", [float(t) for t in args.thresholds.split(",")])
        print("\nThe refusal rule alone (best passage's similarity below the threshold: refused):")
        for row in report["gate"]["rows"]:
            mark = "  <- llm.min_similarity" if row["configured"] else ""
            kinds = ", ".join(f"{k[8:]} {v}" for k, v in row.items() if k.startswith("refused_"))
            print(
                f"  {row['threshold']:.3f}: answerable refused {row['false_refusals']}/{row['answerable']}; "
                f"unanswerable refused {row['refused']}/{row['unanswerable']} ({kinds}){mark}"
            )
    if args.model:
        report["model"] = run_model(args, work)
        s = report["model"]["summary"]
        print(f"\n{report['model']['model']} over the repository's docs:")
        print(
            f"  answerable: answered {s['answered']}/{s['answerable']}, facts {s['fact_recall']}/{s['answerable']}, "
            f"citation coverage {s['citation_coverage']}, support {s['support']}"
        )
        print(f"  unanswerable: refused {s['refused']}/{s['unanswerable']}; {s['mean_seconds']} s per question")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()

"""Refusal and faithfulness of the ask route, measured.

Two measures:

``--gate`` (offline, no language model, a minute): the refusal rule alone. The real Search deployment indexes the 54
passages of tests/data/retrieval (one document each); for each of its 59 answerable questions and the 21
unanswerable ones of tests/data/ask/unanswerable.jsonl (off-topic and near-topic, in English, isiZulu, Afrikaans and
Sesotho) it takes the best passage's similarity, as the ask route does, and counts, per threshold around
``llm.min_similarity``: answerable questions refused (false refusals) and unanswerable ones refused.

``--answer`` (the extractive answerer, offline) or ``--model NAME|DIR`` (a language model): the whole route. Each
question set's documents go into a knowledge base through the HTTP service (ingress, Search and LLM deployments
under Serve's local testing mode, in this process), and each question is asked, streamed:

- ``docs``: the repository's own docs (README.md and docs/*.md), tests/data/ask/docs_questions.jsonl;
- ``sa``: six documents in South African settings (tests/data/ask/sa/), tests/data/ask/sa_questions.jsonl.

Answerable questions (``expect``: facts the documents state): fact recall (every expected string in the answer),
refusals, citation coverage (answer sentences that cite a source [n]); unanswerable ones (``refuse``): refused ("I
don't know from these documents.") or answered. For every shown sentence: whether it has a number, time, date or
name that its cited passages do not contain (plain substring search, independent of the route's own check). The
sentences' fates (generated, extracted, withheld), the loops cut, and the time from sending the question to the
first ``delta`` event. Questions marked ``heldout`` were written after the answerers were tuned and are reported
apart (tuned, held-out, all). ``--decoding`` runs a language model once per decoding setting.

Usage::

    .venv/bin/python scripts/eval_ask.py --gate
    .venv/bin/python scripts/eval_ask.py --answer [--sets docs,sa]          # the extractive answerer
    .venv/bin/python scripts/eval_ask.py --model smollm2-135m-instruct [--sets docs,sa] [--translation-model NAME]
        [--decoding 1.0:0,1.1:0,1.3:0,1.1:4]   # repetition_penalty:no_repeat_ngram_size, one run each
        [--data-dir DIR]   # where `khuluma models pull|add` registered them (default: KHULUMA_DATA_DIR)
        [--top-k 5] [--json out.json] [--show]

Figures go to docs/search.md with the command that made them; timings on a shared machine are indicative (the
command prints them all in one run, for a rerun on a quiet one).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ASK = ROOT / "tests" / "data" / "ask"
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


_FACT = re.compile(r"\d[\d:.,h]*\d|\d|(?<=\s)[A-Z][\w-]+")


def unsupported_facts(sentence: str, passages: list[str]) -> list[str]:
    """The numbers, times, dates and names (capitalised words after the first) of a shown sentence that its cited
    passages do not contain (plain substring search: independent of the route's own check)."""
    source = " ".join(passages).lower().replace(",", "")
    claim = _MARKER.sub(" ", sentence)
    return [f for f in _FACT.findall(" " + claim) if f.lower().replace(",", "").strip(".:") not in source]


def score(question: dict[str, Any], body: dict[str, Any], first_delta_s: float | None) -> dict[str, Any]:
    answer = body.get("answer", "")
    refused = bool(body.get("refused"))
    out: dict[str, Any] = {
        "id": question["id"],
        "heldout": bool(question.get("heldout")),
        "refused": refused,
        "answer": answer,
        "ttft": first_delta_s,
        "looped": any("repeating itself" in w for w in body.get("warnings", [])),
    }
    by_id = {c["id"]: c["text"] for c in body.get("citations", [])}
    found = sentences(answer) if not refused else []
    bad = []
    for s in found:
        cites = [by_id[n] for n in cited(s) if n in by_id] or list(by_id.values())
        if unsupported_facts(s, cites):
            bad.append(s)
    out["unsupported_shown"] = bad
    kinds = [s.get("origin") for s in body.get("sentences", [])]
    out["generated"], out["extracted"], out["withheld"] = (
        kinds.count(k) for k in ("generated", "extracted", "withheld")
    )
    if question.get("refuse"):
        return out
    out["facts"] = not refused and all(f.lower() in answer.lower() for f in question["expect"])
    with_citation = [s for s in found if cited(s) & by_id.keys()]
    out["sentences"] = len(found)
    out["cited"] = len(with_citation)
    return out


SETS = {
    "docs": (lambda: [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ASK / "docs_questions.jsonl"),
    "sa": (lambda: sorted((ASK / "sa").glob("*.txt")), ASK / "sa_questions.jsonl"),
}


def ask_streamed(
    client: Any, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[dict[str, Any], float | None]:
    """The streamed answer's done event and the seconds to its first delta (what a reader waits for)."""
    started = time.perf_counter()
    first: float | None = None
    done: dict[str, Any] = {}
    with client.stream("POST", url, json={**body, "stream": True}, headers=headers) as r:
        r.raise_for_status()
        event = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                if event == "delta" and first is None:
                    first = time.perf_counter() - started
                if event == "done":
                    done = json.loads(line[6:])
    return done, first


def run_answerer(
    args: argparse.Namespace, work: Path, name: str, decoding: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every question of the set ``name`` through the ask route (``decoding``: the language model's
    ``repetition_penalty`` and ``no_repeat_ngram_size``, else the settings' defaults)."""
    decoding = decoding or {}
    from contracts.settings import Settings, get_settings
    from engines.models.registry import ModelRegistry
    from engines.models.resolve import resolve
    from khuluma.app import build_local
    from persistence.session import Database
    from serve_app.tokens import create_token

    changes: dict[str, Any] = {"search": {"chroma_path": work / "chroma"}}
    capabilities = ["search"]
    label = "extractive"
    if args.model:
        registry = ModelRegistry(args.data_dir or get_settings().data_dir)
        model = resolve(registry, args.model, "llm")
        changes["llm"] = {"model": model.path, "threads": args.threads, **decoding}
        capabilities.append("llm")
        label = model.name
        if args.translation_model:
            changes["translation"] = {"model": resolve(registry, args.translation_model, "translation").path}
            capabilities.append("translation")
    settings = Settings(data_dir=work, _env_file=None).updated(changes)
    headers = {"X-CLIENT-TOKEN": create_token(Database.migrated(settings.db_url), "eval")[0]}
    handles = build_local(settings, capabilities)
    client = _client(settings, handles)
    documents, questions = SETS[name]
    try:
        kb = client.post("/api/v1/search/knowledgebase", json={"knowledgebase_name": name}, headers=headers)
        kb_id = kb.json()["id"]
        for doc in documents():
            files = {"file": (doc.name, io.BytesIO(doc.read_bytes()), "text/plain")}
            r = client.post(f"/api/v1/search/knowledgebase/{kb_id}/document", files=files, headers=headers)
            r.raise_for_status()
        results = []
        for q in _lines(questions):
            body = {"question": q["question"], "top_k": args.top_k, "lang": q.get("lang")}
            done, first = ask_streamed(client, f"/api/v1/search/knowledgebase/{kb_id}/ask", body, headers)
            result = score(q, done, first)
            results.append(result)
            if args.show:
                print(json.dumps(result, ensure_ascii=False), flush=True)
    finally:
        handles["search"].close.remote().result()
    return {"answerer": label, "set": name, "decoding": decoding, "results": results, "summary": summary(results)}


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
    ttfts = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    return {
        "answerable": len(answerable),
        "fact_recall": round(sum(r["facts"] for r in answerable) / max(1, len(answerable)), 3),
        "answerable_refused": sum(r["refused"] for r in answerable),
        "citation_coverage": round(sum(r["cited"] for r in answerable) / sentences_, 3) if sentences_ else None,
        "unanswerable": len(unanswerable),
        "unanswerable_refused": sum(r["refused"] for r in unanswerable),
        "unanswerable_answered": sum(not r["refused"] for r in unanswerable),
        "unsupported_shown": sum(len(r["unsupported_shown"]) for r in results),
        "sentences": {k: sum(r[k] for r in results) for k in ("generated", "extracted", "withheld")},
        "looped": sum(r["looped"] for r in results),
        "ttft_median_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_max_s": round(ttfts[-1], 3) if ttfts else None,
    }


def splits(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The summary of the questions the answerers were tuned on, of the held-out ones, and of all."""
    return {
        "tuned": summary([r for r in results if not r["heldout"]]),
        "heldout": summary([r for r in results if r["heldout"]]),
        "all": summary(results),
    }


def report(run: dict[str, Any]) -> None:
    decoding = run["decoding"]
    how = ""
    if decoding:
        how = f" (repetition_penalty {decoding['repetition_penalty']}, no_repeat_ngram_size "
        how += f"{decoding['no_repeat_ngram_size']})"
    print(f"\n{run['answerer']}{how} on the {run['set']} set (shared machine: timings are indicative):")
    for part, s in splits(run["results"]).items():
        if not s["answerable"] and not s["unanswerable"]:
            continue
        print(
            f"  {part:8s} answerable {s['answerable']}: fact recall {s['fact_recall']}, refused "
            f"{s['answerable_refused']}; unanswerable {s['unanswerable']}: refused {s['unanswerable_refused']}, "
            f"answered {s['unanswerable_answered']}; unsupported shown {s['unsupported_shown']}; loops cut "
            f"{s['looped']}; sentences {s['sentences']}; first delta median {s['ttft_median_s']} s, max "
            f"{s['ttft_max_s']} s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gate", action="store_true", help="The refusal rule alone (no language model).")
    ap.add_argument("--thresholds", default="0.77,0.78,0.79,0.8,0.81,0.82,0.83,0.84,0.85")
    ap.add_argument(
        "--answer",
        action="store_true",
        help="Ask every question of --sets (the extractive answerer unless --model names a language model).",
    )
    ap.add_argument("--model", help="An installed language model (name or directory); implies --answer.")
    ap.add_argument(
        "--sets",
        default="docs,sa",
        help="Question sets: docs (the repository's docs), sa (South African public information).",
    )
    ap.add_argument(
        "--decoding",
        help="With --model: decoding settings to compare, each PENALTY:NGRAM (repetition_penalty and "
        "no_repeat_ngram_size), e.g. 1.0:0,1.1:0,1.2:0,1.1:4; every set is run once per setting.",
    )
    ap.add_argument("--translation-model", help="An installed translation model (the translate-test pipeline).")
    ap.add_argument("--data-dir", help="Data directory of the model registry (default: KHULUMA_DATA_DIR).")
    ap.add_argument("--threads", type=int, default=2, help="The language model's CPU threads.")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--show", action="store_true", help="Print each question's result as it comes.")
    args = ap.parse_args()
    if not args.gate and not args.model and not args.answer:
        ap.error("give --gate, --answer or --model")
    work = Path(tempfile.mkdtemp(prefix="khuluma-eval-ask-"))
    out: dict[str, Any] = {}
    if args.gate:
        out["gate"] = gate(work / "gate", [float(t) for t in args.thresholds.split(",")])
        print("\nThe refusal rule alone (best passage's similarity below the threshold: refused):")
        for row in out["gate"]["rows"]:
            mark = "  <- llm.min_similarity" if row["configured"] else ""
            kinds = ", ".join(f"{k[8:]} {v}" for k, v in row.items() if k.startswith("refused_"))
            print(
                f"  {row['threshold']:.3f}: answerable refused {row['false_refusals']}/{row['answerable']}; "
                f"unanswerable refused {row['refused']}/{row['unanswerable']} ({kinds}){mark}"
            )
    if args.model or args.answer:
        out["answers"] = []
        settings = [None]
        if args.decoding:
            if not args.model:
                ap.error("--decoding needs --model")
            settings = [_decoding(d) for d in args.decoding.split(",")]
        for decoding in settings:
            for name in args.sets.split(","):
                label = name if decoding is None else f"{name}-{len(out['answers'])}"
                run = run_answerer(args, work / label, name, decoding)
                out["answers"].append(run)
                report(run)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False))


def _decoding(text: str) -> dict[str, Any]:
    penalty, ngram = text.split(":")
    return {"repetition_penalty": float(penalty), "no_repeat_ngram_size": int(ngram)}


if __name__ == "__main__":
    main()

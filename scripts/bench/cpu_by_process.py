"""Where the CPU goes under the text routes' load through Ray Serve: CPU seconds of every process on the machine
(replicas, HAProxy, Ray's own processes, this load generator) during ``--duration`` seconds of each route, with
the same 16 closed-loop clients and requests as ``bench_text.py --ray``.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/cpu_by_process.py [--routes ner,sentiment,classify] [--embedder local]

``--routes health,auth`` looks at Serve's own cost instead (the routes of bench_serve_overhead.py, no model).

A process's share of a core is its CPU seconds over the wall time; "idle" is what none of them used.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import load  # noqa: E402
from _plain import ray_server  # noqa: E402
from bench_text import CLASSIFY, NER_TEXTS, SENTIMENT_TEXTS  # noqa: E402


def cpu_seconds() -> dict[int, tuple[str, float]]:
    out = {}
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            times = proc.cpu_times()
            name = " ".join(proc.info["cmdline"] or [proc.info["name"]])
            out[proc.pid] = (name, times.user + times.system)
        except psutil.Error:
            continue
    return out


def label(name: str, pid: int) -> str:
    if pid == os.getpid():
        return "this load generator"
    if name.startswith("ray::"):
        return name.split()[0].removeprefix("ray::").replace("ServeReplica:khuluma:", "replica ")
    return Path(name.split()[0]).name if name else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routes", default="ner,sentiment,classify")
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--embedder", choices=("local", "deployment"), default="local")
    args = ap.parse_args()

    data = tempfile.mkdtemp(prefix="khuluma-bench-cpu-")
    from contracts.settings import Settings
    from persistence.session import Database
    from serve_app.tokens import create_token

    token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
    headers = {"X-CLIENT-TOKEN": token, "Content-Type": "application/json"}
    ner = [{"encoded_text": f"{t} Ref {i}."} for i, t in zip(range(512), itertools.cycle(NER_TEXTS))]
    sentiment = [{"encoded_text": f"{t} {i}"} for i, t in zip(range(512), itertools.cycle(SENTIMENT_TEXTS))]
    classify = [
        {"examples": CLASSIFY["examples"], "inputs": [f"{x} {i}" for x in CLASSIFY["inputs"]]} for i in range(512)
    ]
    routes: dict[str, tuple[str, list | None]] = {
        "health": ("/api/v1/health", None),  # Serve's own cost: no token, no model (bench_serve_overhead.py)
        "auth": ("/ws/stream-transcribe", None),  # the token check, no model
        "ner": ("/api/v1/entity_recognition/process", ner),
        "sentiment": ("/api/v1/sentiment_analysis/process", sentiment),
        "classify": ("/api/v1/classify", classify),
    }
    settings = {"data_dir": data, "embeddings": {"placement": args.embedder}}
    names = args.routes.split(",")
    capabilities = ["text"] if set(names) - {"health", "auth"} else ["none"]
    with ray_server(settings, capabilities) as url:
        for name in names:
            path, bodies = routes[name]
            method, body = "GET", None
            if bodies is not None:
                method, body = "POST", itertools.cycle([json.dumps(b).encode() for b in bodies]).__next__
            load(method, url + path, concurrency=16, duration=3, headers=headers, data_factory=body)
            before, started = cpu_seconds(), time.monotonic()
            result = load(
                method, url + path, concurrency=16, duration=args.duration, headers=headers, data_factory=body, warmup=0
            )
            after, wall = cpu_seconds(), time.monotonic() - started
            used: dict[str, float] = {}
            for pid, (proc_name, seconds) in after.items():
                if pid in before:
                    key = label(proc_name, pid)
                    used[key] = used.get(key, 0.0) + seconds - before[pid][1]
            cores = os.cpu_count() or 1
            print(f"\n{name}: {result.rps:.1f} req/s (p50 {result.pct(50):.0f} ms), {wall:.1f} s on {cores} cores")
            for key, seconds in sorted(used.items(), key=lambda kv: -kv[1])[:10]:
                print(f"  {100 * seconds / wall:5.0f}% of a core  {key}")
            print(f"  {100 * (cores * wall - sum(used.values())) / wall:5.0f}% of a core  idle")


if __name__ == "__main__":
    main()

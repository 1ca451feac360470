"""The per-request CPU budget of the light routes, stage by stage: py-spy samples the server under load and each
sample is put in the stage of the code it was running (HTTP parsing, token check, admission, metering, validation,
the handle call, the model, serialisation, logging, the rest of the framework and the event loop).

The server runs as ``bench_text.py`` runs it: plain uvicorn with the deployments in Serve's local testing mode (one
process, no Ray: every stage of the request path is in the one profile), or with ``--ray`` a real Ray Serve
application, where the Ingress replica and the TextAnalysis replica are each profiled. 16 closed-loop clients send
``--route`` (``ner``, ``sentiment``, ``classify`` or ``auth``, the trivial authenticated route of
``bench_serve_overhead.py``) for ``--duration`` seconds. Prints, per process, the CPU milliseconds per request of
each stage and its share. py-spy is in the ``bench`` extra; it attaches with ptrace (as root, or with
``kernel.yama.ptrace_scope`` 0).

    .venv/bin/python scripts/bench/profile_light.py [--route ner] [--duration 10] [--ray] [--settings '{...}']
        [--flame out.txt]

Sampling costs the profiled process a little (``--nonblocking``: py-spy reads it without stopping it), so the
requests/s here are below ``bench_text.py``'s; the budget per request is what this is for.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import load  # noqa: E402
from _plain import plain_process, ray_server  # noqa: E402
from bench_text import CLASSIFY, NER_TEXTS, SENTIMENT_TEXTS  # noqa: E402

RATE = 250  # samples per second

# (stage, the frame texts that put a sample in it). The work of the request's own stages first, in priority order: a
# sample goes to the first of them any of its frames matches (so the model's own frames win over the deployment code
# that called them, the token check over the dependency resolution around it, serialisation over the pydantic calls
# it makes). Else the framework around them (FRAMEWORK): the stage of the innermost frame that matches one, so
# Starlette's routing under our middleware counts as routing, and uvicorn's writing under a send wrapper as HTTP.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("model (engines)", ("(engines/", "(spacy/", "(thinc/", "(sklearn/", "(numpy/", "(onnxruntime/", "(tokenizers/")),
    ("logging", ("(logging/__init__.py", "(contracts/logs.py")),
    ("metering (usage rows)", ("(serve_app/services/usage.py", "(persistence/usage_meter.py", "(sqlalchemy/")),
    ("admission (capacity, requests per minute)", ("(serve_app/admission/", "admit (serve_app/auth.py")),
    ("token check", ("(serve_app/tokens.py", "(serve_app/auth.py", "(hashlib")),
    (
        "serialisation (response model, JSON)",
        ("serialize_response", "jsonable_encoder", "render (", "(json/encoder.py", "(orjson"),
    ),
    (
        "handle call (batching, typed handle, deployment wrapper)",
        (
            "(contracts/batching.py",
            "(contracts/handles.py",
            "(contracts/text.py",
            "(deployments/",
            "(ray/serve/handle.py",
        ),
    ),
    (
        "validation (body, pydantic, service checks)",
        ("(fastapi/dependencies/", "(fastapi/_compat", "(pydantic", "(serve_app/services/"),
    ),
]
FRAMEWORK: list[tuple[str, tuple[str, ...]]] = [
    (
        "our middleware (request id, body limit, metrics)",
        ("(serve_app/middleware.py", "(runtime/metrics.py", "(prometheus_client/"),
    ),
    (
        "HTTP parsing and writing (uvicorn)",
        ("(uvicorn/", "(httptools/", "(h11/", "(asyncio/selector_events.py", "(asyncio/streams.py"),
    ),
    ("routing and framework (Starlette, FastAPI)", ("(starlette/", "(fastapi/", "(anyio/")),
    ("Ray Serve in the replica (request intake, handle routing, gRPC, metrics)", ("(ray/", "(grpc/")),
]
OTHER = "event loop and the rest"


def stage_of(frames: list[str]) -> str:
    for stage, needles in STAGES:
        if any(needle in frame for frame in frames for needle in needles):
            return stage
    for frame in reversed(frames):  # innermost first
        for stage, needles in FRAMEWORK:
            if any(needle in frame for needle in needles):
                return stage
    return OTHER


def read_samples(path: Path) -> collections.Counter[str]:
    """py-spy's raw output (one collapsed stack and its count per line) by stage, in samples."""
    by_stage: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            by_stage[stage_of(stack.split(";"))] += int(count)
    return by_stage


def request_body(route: str) -> tuple[str, str, list[bytes]]:
    """Method, path and the distinct bodies (a number appended, so no cache answers) of a route."""
    if route == "auth":
        return "GET", "/ws/stream-transcribe", [b""]
    if route == "classify":
        bodies = [
            {"examples": CLASSIFY["examples"], "inputs": [f"{x} {i}" for x in CLASSIFY["inputs"]]} for i in range(4096)
        ]
        return "POST", "/api/v1/classify", [json.dumps(b).encode() for b in bodies]
    texts = NER_TEXTS if route == "ner" else SENTIMENT_TEXTS
    path = "/api/v1/entity_recognition/process" if route == "ner" else "/api/v1/sentiment_analysis/process"
    return (
        "POST",
        path,
        [json.dumps({"encoded_text": f"{texts[i % len(texts)]} Ref {i}."}).encode() for i in range(4096)],
    )


def profile(pids: dict[str, int], url: str, route: str, token: str, duration: float, flame: Path | None) -> None:
    method, path, bodies = request_body(route)
    headers = {"X-CLIENT-TOKEN": token, "Content-Type": "application/json"}
    cycle = itertools.cycle(bodies)
    load(method, url + path, concurrency=16, duration=3, headers=headers, data_factory=lambda: next(cycle) or None)
    out = Path(tempfile.mkdtemp(prefix="khuluma-profile-"))
    spies = {
        name: subprocess.Popen(
            ["py-spy", "record", "--pid", str(pid), "--rate", str(RATE), "--duration", str(int(duration)),
             "--format", "raw", "--nonblocking", "--gil", "--output", str(out / f"{name}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    }  # fmt: skip
    time.sleep(1)  # attached
    result = load(
        method,
        url + path,
        concurrency=16,
        duration=duration - 1.5,
        headers=headers,
        data_factory=lambda: next(cycle) or None,
    )
    for spy in spies.values():
        spy.wait()
    served = result.requests
    print(f"\n{route}: {result.rps:.1f} req/s under the profiler ({served} requests, {result.errors} errors)")
    for name in pids:
        samples = read_samples(out / f"{name}.txt")
        total = sum(samples.values())
        seconds = duration - 1.5
        print(f"\n{name}: {1000 * total / RATE / max(1, result.rps * seconds):.3f} ms of CPU per request (sampled)")
        for stage, count in samples.most_common():
            per_request = 1000 * count / RATE / max(1, result.rps * seconds)
            print(f"  {stage:58} {per_request:7.3f} ms  {100 * count / max(1, total):5.1f} %")
        if flame:
            flame.with_suffix(f".{name}.txt").write_text((out / f"{name}.txt").read_text())


def find_replica(deployment: str) -> int:
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        if any(f"ServeReplica:khuluma:{deployment}" in part for part in proc.info["cmdline"] or ()):
            return proc.pid
    raise RuntimeError(f"no {deployment} replica found")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--route", default="ner", choices=("ner", "sentiment", "classify", "auth"))
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--ray", action="store_true", help="profile a Ray Serve application's Ingress and TextAnalysis")
    ap.add_argument("--settings", type=json.loads, default={}, help="Settings fields to override, as JSON")
    ap.add_argument("--flame", type=Path, help="also keep py-spy's raw stacks next to this path")
    args = ap.parse_args()
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # the venv's py-spy
    from contracts.settings import Settings, deep_merge
    from persistence.session import Database
    from serve_app.tokens import create_token

    data = tempfile.mkdtemp(prefix="khuluma-profile-")
    settings = deep_merge({"data_dir": data}, args.settings)
    token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
    capabilities = [] if args.route == "auth" else ["text"]
    if args.ray:
        with ray_server(settings, capabilities or ["none"]) as url:
            pids = {"Ingress replica": find_replica("Ingress")}
            if capabilities:
                try:
                    pids["TextAnalysis replica"] = find_replica("TextAnalysis")
                except RuntimeError:
                    pass  # served in the ingress (text.ner_in_ingress)
            profile(pids, url, args.route, token, args.duration, args.flame)
    else:
        with plain_process(settings, capabilities) as (url, pid):
            profile({"uvicorn, local testing mode": pid}, url, args.route, token, args.duration, args.flame)


if __name__ == "__main__":
    main()

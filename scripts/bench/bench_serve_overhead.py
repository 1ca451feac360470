"""Ray Serve overhead: the same FastAPI ingress behind Ray Serve vs plain uvicorn, in one run.

Measures requests/s and p50/p99 for /api/v1/health (no token) and an authenticated route
(GET /ws/stream-transcribe: token check, no model) with N concurrent clients. Prints the ratio.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_serve_overhead.py [--duration 10] [--concurrency 16] [--warmup 5]

Serve gets ``--warmup`` seconds of the same load first, unmeasured (plain uvicorn gets a few requests: it has no
pools or actors to warm), and the run ends with the number of Ingress replicas Serve was running.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, load, table, write_json  # noqa: E402
from _plain import free_port, plain_server, wait_healthy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument(
        "--warmup",
        type=float,
        default=5,
        help="Seconds of unmeasured load through Serve first. 0: measure at once.",
    )
    json_option(ap)
    args = ap.parse_args()

    data = tempfile.mkdtemp(prefix="khuluma-bench-")
    from contracts.settings import Settings
    from persistence.session import Database
    from serve_app.tokens import create_token

    settings = Settings(data_dir=data)
    token = create_token(Database.migrated(settings.db_url), "bench")[0]
    headers = {"X-CLIENT-TOKEN": token}

    # Ray Serve: the ingress alone (no model deployments), configured as `khuluma serve` does.
    from khuluma.cli.serve import load_serve_config, ray_env

    os.environ.update(ray_env())
    import ray
    from ray import serve

    from khuluma.app import build_app

    serve_port = free_port()
    cfg = load_serve_config(ROOT / "configs" / "serve.yaml")
    ray.init(address="local", include_dashboard=False, logging_level="ERROR", runtime_env={"env_vars": ray_env()})
    serve.start(http_options={"host": "127.0.0.1", "port": serve_port}, logging_config=cfg.get("logging_config"))
    serve.run(
        build_app({"settings": {"data_dir": data}, "capabilities": ["none"], "deployments": cfg["deployments"]}),
        name="khuluma",
        route_prefix="/",
        blocking=False,
        logging_config=cfg.get("logging_config"),
    )
    serve_url = f"http://127.0.0.1:{serve_port}"
    wait_healthy(serve_url)

    try:
        with plain_server({"data_dir": data}) as plain_url:
            rows = _compare(plain_url, serve_url, headers, args)
        write_json(args.json, dict(rows))
        print(f"\nconcurrency={args.concurrency} duration={args.duration}s cores={os.cpu_count()}")
        print(table(rows))
        ingress = serve.status().applications["khuluma"].deployments["Ingress"].replica_states
        print(f"Ingress replicas at the end: {dict(ingress)}")
    finally:
        serve.shutdown()
        ray.shutdown()


def _compare(plain_url: str, serve_url: str, headers: dict[str, str], args: argparse.Namespace) -> list:
    """Rows of the table: each route through plain uvicorn, through Serve, and their ratio."""
    if args.warmup:
        load(
            "GET",
            serve_url + "/ws/stream-transcribe",
            concurrency=args.concurrency,
            duration=args.warmup,
            headers=headers,
        )
    rows = []
    for label, path, hdrs in (("health", "/api/v1/health", None), ("auth route", "/ws/stream-transcribe", headers)):
        plain_res = load("GET", plain_url + path, concurrency=args.concurrency, duration=args.duration, headers=hdrs)
        serve_res = load("GET", serve_url + path, concurrency=args.concurrency, duration=args.duration, headers=hdrs)
        rows.append((f"{label}: plain uvicorn", plain_res.row()))
        rows.append((f"{label}: Ray Serve", serve_res.row()))
        rows.append(
            (
                f"{label}: Serve/plain",
                {
                    "req/s": f"{serve_res.rps / plain_res.rps:.2f}x",
                    "p50 ms": f"{serve_res.pct(50) / plain_res.pct(50):.2f}x",
                    "p99 ms": f"{serve_res.pct(99) / plain_res.pct(99):.2f}x",
                    "errors": "",
                    "n": "",
                },
            )
        )
    return rows


if __name__ == "__main__":
    main()

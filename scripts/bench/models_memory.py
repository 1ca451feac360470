"""The memory the service's models and their code need, each loaded once: the least that Khuluma's model
deployments add to Ray Serve's own idle floor (``bench_serve_floor.py --memory``: Ray and Serve with the dashboard on
and the five deployments empty), whatever the layout, as long as the models load when the service starts.

In a child process with a replica's environment (``_plain.replica_environment``, and the ``OMP_NUM_THREADS=1`` Ray
gives a replica with a fractional CPU; no ``KHULUMA_*`` variable and no ``.env``, so the offline defaults) and a
fresh data directory, it imports Ray and Serve (what every replica imports before any code of ours), then constructs
the model deployments of ``khuluma serve`` one after the other as ``khuluma.app`` binds them (TextAnalysis, Speech,
Search: their models, warm-ups and handing freed memory back), and reads the process's PSS after each. In one
process lingua's models, which TextAnalysis and Speech each load, are held once (e5's weights are a shared file
mapping either way), so the sum is a lower bound: the Ingress and Jobs replicas' own code, the ``khuluma serve``
driver and Speech's own copy of lingua come on top.

``run_all.py --only memory,floor,models`` adds it to Ray Serve's floor and the ``khuluma serve`` driver of the same
run and compares the sum with issue 46's goal of 1.5 GiB (1,536 MiB) with the dashboard on.

Runs after ``./scripts/setup.sh --bench``:

    .venv/bin/python scripts/bench/models_memory.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, table, write_json  # noqa: E402
from _plain import replica_environment  # noqa: E402

# khuluma serve's deployments that hold models by default (no translation or language model is set offline)
MODEL_DEPLOYMENTS = ("TextAnalysis", "Speech", "Search")


def pss_mib() -> float:
    import psutil

    return float(psutil.Process().memory_full_info().pss) / (1024 * 1024)


def settled_pss() -> float:
    from runtime.memory import release_freed_memory

    release_freed_memory()
    time.sleep(1)
    return pss_mib()


def child(data_dir: str) -> None:
    """Prints one JSON object: the PSS after Ray and Serve's imports and the growth each model deployment brought
    (its modules, models and warm-up)."""
    import ray.serve  # noqa: F401  (imports ray)

    imported = before = settled_pss()
    from contracts.settings import Settings
    from khuluma.app import SPECS, load_class

    settings = Settings(data_dir=Path(data_dir), _env_file=None)
    growth: dict[str, float] = {}
    held = []  # each deployment stays alive, as in its replica
    for spec in (spec for name in MODEL_DEPLOYMENTS for spec in SPECS if spec.name == name):
        held.append(load_class(spec.target)(settings.for_replica(spec.sections)))
        now = settled_pss()
        growth[spec.name] = now - before
        before = now
    print(json.dumps({"ray and serve imported MiB": imported, "growth MiB": growth}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    json_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    # a replica's environment without the caller's Khuluma settings: the offline defaults of a fresh install
    env = {k: v for k, v in replica_environment().items() if not k.startswith("KHULUMA_")}
    env["OMP_NUM_THREADS"] = "1"  # what Ray gives a replica with a fractional CPU, as the model deployments are
    with tempfile.TemporaryDirectory(prefix="khuluma-models-memory-") as data_dir:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", data_dir],
            cwd=data_dir,  # no .env of the checkout is read
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"the child failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    growth: dict[str, float] = measured["growth MiB"]
    models = sum(growth.values())
    rows = [(name, {"PSS MiB": round(mib)}) for name, mib in growth.items()]
    rows.append(("the models and their code, each once", {"PSS MiB": round(models)}))
    figures = {"models MiB": models, **measured}
    print(
        f"\nOne process with Ray and Serve imported ({measured['ray and serve imported MiB']:.0f} MiB), then each "
        "model deployment constructed (growth of its PSS):"
    )
    print(table(rows))
    write_json(args.json, figures)


if __name__ == "__main__":
    main()

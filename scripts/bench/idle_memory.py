"""Idle memory of the service, per process: PSS (proportional set size, so shared libraries are counted once
across processes) of a fresh ``khuluma serve`` with the offline models loaded: the command and Ray's processes it
started (``scripts/bench/_service.memory_processes``; not SeaweedFS or HAProxy).

It starts the service (as the README does), waits until it is healthy and then ``--settle`` seconds more, and
prints one row per process (Ray's replicas by deployment, raylet, GCS, the dashboard, the ``khuluma serve``
driver), the total, and the total against the 1.5 GB goal of issue 46, read as 1.5 GiB (every "MB" here is a
MiB). ``--after-load`` first sends one request of every text kind and a transcription, so the models' lazy
parts (Whisper's audio decoder and VAD: about 75 MB) are loaded too.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/idle_memory.py [--settle 20] [--after-load] [--no-dashboard]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, table, write_json  # noqa: E402

from scripts.bench._service import memory_processes, pss_by_kind, start_service, stop_service  # noqa: E402
from scripts.bench._speech import espeak  # noqa: E402

GOAL_MB = 1536


def load_once(url: str, token: str, work: Path) -> None:
    h = {"X-CLIENT-TOKEN": token}
    text = "Nelson Mandela was born in Mvezo. Ngiyabonga kakhulu!"
    with httpx.Client(timeout=300) as c:
        c.post(f"{url}/api/v1/entity_recognition/process", headers=h, json={"encoded_text": text}).raise_for_status()
        c.post(f"{url}/api/v1/sentiment_analysis/process", headers=h, json={"encoded_text": text}).raise_for_status()
        c.post(f"{url}/api/v1/language/detect", headers=h, json={"text": text}).raise_for_status()
        wav = espeak("good morning, the weather today is sunny and warm", work / "speech.wav")
        with wav.open("rb") as f:
            sync = f"{url}/api/v2alpha/transcribe/sync/file"
            c.post(sync, headers=h, files={"file": ("s.wav", f)}).raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds to wait after the service is healthy")
    parser.add_argument("--after-load", action="store_true", help="send one request of each kind first")
    parser.add_argument(
        "--no-dashboard", action="store_true", help="start the service without Ray's dashboard (khuluma serve's option)"
    )
    json_option(parser)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="khuluma-memory-"))
    proc, url, token = start_service(work, "memory", options=("--no-dashboard",) if args.no_dashboard else ())
    try:
        if args.after_load:
            load_once(url, token, work)
        time.sleep(args.settle)
        found = pss_by_kind(memory_processes(proc.pid), proc.pid)
    finally:
        stop_service(proc)

    total = sum(mb for _, mb in found.values())
    rows = [
        (name, {"processes": n, "PSS MB": round(mb)})
        for name, (n, mb) in sorted(found.items(), key=lambda item: -item[1][1])
    ]
    rows.append(("total", {"processes": sum(n for n, _ in found.values()), "PSS MB": round(total)}))
    rows.append(("total / 1.5 GiB goal", {"processes": "", "PSS MB": f"{total / GOAL_MB:.2f}x"}))
    state = "after one request of each kind" if args.after_load else "fresh"
    print(f"\nidle PSS of khuluma serve ({state}, dashboard {'off' if args.no_dashboard else 'on'}):")
    print(table(rows))
    if importlib.util.find_spec("pyarrow") is not None:
        print(
            "pyarrow is installed here (the test extra): Ray imports it in every Python process it runs, about 2 MiB "
            "each; the service's and the bench extra's set-ups have none (docs/performance.md, idle memory)."
        )
    write_json(args.json, {"total MB": total, "processes": {name: mb for name, (_, mb) in found.items()}})


if __name__ == "__main__":
    main()

"""Whisper decode layouts on CPU: decodes side by side (CTranslate2 workers) x threads per decode, bare model.

The figure behind ``speech.whisper_parallel_decodes`` and ``speech.whisper_cpu_threads``
(``engines/speech/whisper/placement.decode_placement``).
Bare faster-whisper (no service) transcribes the files of bench_transcription.py with each layout, with 1 and
with 8 concurrent callers, in one run and with the service's ``OMP_WAIT_POLICY=passive``. Printed: files/min
per layout and client count, and each against one decode at a time on every core (faster-whisper's default).

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_whisper_layout.py [--layouts 1x2,2x1,2x2] [--files 8] [--sentences 2]

A layout ``DxT`` is D decodes side by side with T threads each.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # as `khuluma serve` runs its replicas

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from _load import json_option, write_json  # noqa: E402
from bench_transcription import bare_system, make_files, run  # noqa: E402


def main() -> None:
    cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", default=f"1x{cores},{cores}x1,{cores}x{cores}")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--sentences", type=int, default=2)
    parser.add_argument("--clients", default="1,8")
    json_option(parser)
    args = parser.parse_args()

    from engines.speech.whisper.weights import ensure_whisper_base

    workdir = Path(tempfile.mkdtemp(prefix="khuluma-bench-layout-"))
    model_dir = ensure_whisper_base(workdir / "data")
    files = make_files(workdir, args.files, args.sentences)
    layouts = [tuple(int(n) for n in layout.split("x")) for layout in args.layouts.split(",")]
    clients = [int(c) for c in args.clients.split(",")]
    rows = []
    for decodes, threads in layouts:
        transcribe = bare_system(model_dir, threads, workers=decodes)
        for c in clients:
            rows.append({"layout": f"{decodes}x{threads}", **run(f"{decodes}x{threads}", transcribe, files, c)})
        del transcribe
    base = {r["clients"]: r["files_per_min"] for r in rows if r["layout"] == f"1x{cores}"}
    print(f"\n{len(files)} files, {cores} cores, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"{'decodes x threads':18} {'clients':>7} {'files/min':>10} {'vs 1 decode on every core':>26}")
    for r in rows:
        ratio = r["files_per_min"] / base[r["clients"]] if r["clients"] in base else float("nan")
        print(f"{r['layout']:18} {r['clients']:7d} {r['files_per_min']:10.2f} {ratio:26.2f}")
    write_json(args.json, {"cores": cores, "rows": rows})


if __name__ == "__main__":
    main()

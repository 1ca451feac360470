"""Whisper windows decoded one at a time vs in batches: the model-level figure behind ``speech.whisper_batch_size``.

The same 30 s windows (espeak-ng English, as in bench_transcription.py) are decoded by the recognizer's batched
decoder (engines/speech/whisper/batching.py, faster-whisper's batched pipeline) with batches of 1, 4 and 8, each size
``--rounds`` times in turn so that the machine's other load falls on every size alike. Printed: seconds per
round, CPU seconds per window (all threads), and throughput relative to batches of 1. ``--threads`` sets
CTranslate2's threads (default: every core this process may run on).

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_whisper_batch.py [--windows 8] [--rounds 3] [--threads 2]

Fewer cores, to see how batching's gain moves with the cores a replica has (docs/speech.md):

    taskset -c 0 .venv/bin/python scripts/bench/bench_whisper_batch.py --threads 1

On a GPU machine without espeak-ng or the project's venv: save the windows here, then decode them there with only
ctranslate2, faster-whisper, av and aiohttp installed, the joined model directory, and this repository
(docs/speech.md, "Batching on a GPU"):

    .venv/bin/python scripts/bench/bench_whisper_batch.py --save-features windows.npz
    python3 scripts/bench/bench_whisper_batch.py --features windows.npz --model-dir whisper-base --device cuda \\
        --sizes 1,4,8,16
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from _load import json_option, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--sentences", type=int, default=4, help="sentences per window (about 4 s each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--sizes", default="1,4,8")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--compute-type", help="CTranslate2 compute type (default: int8 on cpu, float16 on cuda)")
    parser.add_argument("--model-dir", help="a CTranslate2 Whisper directory (default: the offline whisper-base)")
    parser.add_argument("--save-features", help="write the windows' features here (.npz) and stop")
    parser.add_argument("--features", help="decode the windows saved by --save-features instead of making audio")
    json_option(parser)
    args = parser.parse_args()

    import numpy as np

    from engines.speech.whisper.recognizer import WhisperRecognizer

    workdir = Path(tempfile.mkdtemp(prefix="khuluma-bench-wbatch-"))
    model_dir = args.model_dir or _offline_model(workdir)
    compute_type = args.compute_type or ("float16" if args.device == "cuda" else "int8")
    recognizer = WhisperRecognizer(model_dir, cpu_threads=args.threads, device=args.device, compute_type=compute_type)
    route = recognizer.route("eng")
    if args.features:
        saved = np.load(args.features)
        features = list(saved["features"])
        metadata = [{"offset": 0.0, "duration": float(d), "segments": []} for d in saved["durations"]]
    else:
        features, metadata = _windows(recognizer.model(route.model_key), workdir, args.windows, args.sentences)
    if args.save_features:
        durations = [m["duration"] for m in metadata]
        np.savez_compressed(args.save_features, features=np.stack(features), durations=np.array(durations))
        print(f"{len(features)} windows saved to {args.save_features}")
        return
    key = (route.model_key, route.language_token)
    sizes = [int(s) for s in args.sizes.split(",")]

    recognizer._decode_batch(key, np.stack(features[:1]), metadata[:1])  # warm-up
    times: dict[int, list[float]] = {size: [] for size in sizes}
    cpu: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            started, cpu_started = time.perf_counter(), time.process_time()
            for i in range(0, len(features), size):
                recognizer._decode_batch(key, np.stack(features[i : i + size]), metadata[i : i + size])
            times[size].append(time.perf_counter() - started)
            cpu[size].append(time.process_time() - cpu_started)
    cores = len(os.sched_getaffinity(0))
    where = f"{args.threads} CTranslate2 threads on {cores} core(s)" if args.device == "cpu" else _gpu_description()
    print(f"{len(features)} windows, {where}, {compute_type}, {args.rounds} rounds")
    base = statistics.median(times[sizes[0]])
    rows = []
    for size in sizes:
        median = statistics.median(times[size])
        cpu_per_window = statistics.median(cpu[size]) / len(features)
        rows.append(
            {
                "batch": size,
                "median_s": round(median, 2),
                "rounds_s": [round(t, 2) for t in times[size]],
                "cpu_s_per_window": round(cpu_per_window, 3),
            }
        )
        print(
            f"batch {size}: {median:.2f} s per round (rounds {rows[-1]['rounds_s']}); {base / median:.2f}x batch 1; "
            f"{cpu_per_window:.2f} CPU s per window"
        )
    write_json(args.json, {"threads": args.threads, "cores": cores, "device": args.device, "rows": rows})


def _offline_model(workdir: Path) -> str:
    from engines.speech.whisper.weights import ensure_whisper_base

    return str(ensure_whisper_base(workdir / "data"))


def _windows(model: Any, workdir: Path, count: int, sentences: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """``count`` 30 s windows of espeak-ng English (log-mel features) and their metadata for the batched decoder."""
    from bench_transcription import make_files

    from engines.speech.audio import load_audio
    from engines.speech.whisper.adapter import window_features

    features, metadata = [], []
    for path, seconds in make_files(workdir, count, sentences):
        audio = load_audio(str(path))[: 30 * 16000]
        features += window_features(model, [audio])
        metadata.append({"offset": 0.0, "duration": min(seconds, 30.0), "segments": []})
    return features, metadata


def _gpu_description() -> str:
    import ctranslate2

    return f"{ctranslate2.get_cuda_device_count()} CUDA device(s)"


if __name__ == "__main__":
    main()

"""Whisper windows decoded one at a time vs in batches: the model-level figure behind ``whisper.batch_size``.

The same 30 s windows (espeak-ng English, as in bench_transcription.py) are decoded by the recognizer's batched
decoder (engines/asr_batching.py, faster-whisper's batched pipeline) with batches of 1, 4 and 8, each size
``--rounds`` times in turn so that the machine's other load falls on every size alike. Printed: seconds per
round, CPU seconds per window (all threads), and throughput relative to batches of 1. ``--threads`` sets
CTranslate2's threads (default: every core this process may run on).

    .venv/bin/python scripts/bench/bench_whisper_batch.py [--windows 8] [--rounds 3] [--threads 2]

Fewer cores, to see how batching's gain moves with the cores a replica has (docs/speech.md):

    taskset -c 0 .venv/bin/python scripts/bench/bench_whisper_batch.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from _load import json_option, write_json  # noqa: E402
from bench_transcription import make_files  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--sentences", type=int, default=4, help="sentences per window (about 4 s each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--sizes", default="1,4,8")
    json_option(parser)
    args = parser.parse_args()

    from faster_whisper.audio import pad_or_trim

    from engines.asr import SpeechRecognizer
    from engines.audio import load_audio
    from engines.whisper_weights import ensure_whisper_base

    workdir = Path(tempfile.mkdtemp(prefix="khuluma-bench-wbatch-"))
    recognizer = SpeechRecognizer(ensure_whisper_base(workdir / "data"), cpu_threads=args.threads)
    route = recognizer.route("eng")
    model = recognizer.model(route.model_key)
    features, metadata = [], []
    for path, seconds in make_files(workdir, args.windows, args.sentences):
        audio = load_audio(str(path))[: 30 * 16000]
        features.append(pad_or_trim(model.feature_extractor(audio)[..., :-1]))
        metadata.append({"offset": 0.0, "duration": min(seconds, 30.0), "segments": []})
    key = (route.model_key, route.whisper_language)
    sizes = [int(s) for s in args.sizes.split(",")]
    import numpy as np

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
    print(f"{len(features)} windows, {args.threads} CTranslate2 threads on {cores} core(s), {args.rounds} rounds")
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
    write_json(args.json, {"threads": args.threads, "cores": cores, "rows": rows})


if __name__ == "__main__":
    main()

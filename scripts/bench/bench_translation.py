"""Translation throughput: the service (16 concurrent HTTP clients) vs the bare CTranslate2 translator, one run.

The same sentences (one per request) go (1) straight to ``ctranslate2.Translator.translate_batch`` with the same
SentencePiece tokenisation, language tokens, beam size and max length, and (2) through the HTTP API: auth,
validation, usage metering, the Translation deployment's request batching, sentence splitting. Prints
sentences/s and the ratio service/bare.

Default model: a tiny random NLLB-architecture model built on the spot (scripts/bench/_tiny_models.py), so the numbers
show the serving overhead, not NLLB speed. ``--model`` takes any installed name or directory (e.g. a real
NLLB-200 after ``khuluma models pull``).

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_translation.py [--model NAME|DIR] [--duration 10] [--concurrency 16]
                                                        [--ray]   # also through a Ray Serve deployment
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import load, table  # noqa: E402
from _plain import plain_server, ray_server  # noqa: E402

PAIRS = [
    ("eng_Latn", "zul_Latn"),
    ("zul_Latn", "eng_Latn"),
    ("afr_Latn", "xho_Latn"),
    ("sot_Latn", "eng_Latn"),
    ("eng_Latn", "tsn_Latn"),
    ("nso_Latn", "afr_Latn"),
]


class BareCT2:
    """ctranslate2.Translator + SentencePiece on the same inputs, nothing else."""

    def __init__(self, model_dir: Path, requests: list[dict], beam: int, max_length: int, threads: int) -> None:
        import ctranslate2
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=str(model_dir / "sentencepiece.bpe.model"))
        self.translator = ctranslate2.Translator(
            str(model_dir), device="auto", intra_threads=threads, compute_type={"cpu": "int8", "cuda": "float16"}
        )
        self.requests, self.beam, self.max_length = requests, beam, max_length

    def sentences_per_s(self, batch: int, rounds: int = 2) -> float:
        def run() -> None:
            sources = [
                [r["source_lang"], *self.sp.encode(r["input_text"], out_type=str), "</s>"] for r in self.requests
            ]
            results = self.translator.translate_batch(
                sources,
                target_prefix=[[r["target_lang"]] for r in self.requests],
                beam_size=self.beam,
                max_decoding_length=self.max_length,
                max_batch_size=batch,
            )
            [self.sp.decode(res.hypotheses[0][1:]) for res in results]

        run()  # warm-up
        start = time.perf_counter()
        for _ in range(rounds):
            run()
        return rounds * len(self.requests) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="Installed model name or directory (default: a tiny random NLLB model).")
    ap.add_argument("--data-dir", help="Data directory holding the model registry (default: a temp dir).")
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--beam", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="CTranslate2 intra threads (0: its default).")
    ap.add_argument("--ray", action="store_true", help="Also measure through a Ray Serve deployment.")
    args = ap.parse_args()

    data = args.data_dir or tempfile.mkdtemp(prefix="khuluma-bench-tr-")
    from scripts.bench._tiny_models import build_tiny_nllb, convert_tiny, training_lines

    if args.model:
        from engines.models.registry import ModelRegistry
        from engines.models.resolve import resolve

        entry = resolve(ModelRegistry(data), args.model)
        model_dir, model_label = Path(entry.path), entry.name
    else:
        hf = build_tiny_nllb(Path(data) / "tiny-hf")
        model_dir, model_label = convert_tiny(hf, Path(data) / "tiny-ct2", "int8"), "tiny random NLLB (int8)"
    requests = [
        {"input_text": line.rstrip(",") or "Sawubona.", "source_lang": s, "target_lang": t}
        for line, (s, t) in zip(training_lines(args.sentences, seed=7), itertools.cycle(PAIRS))
    ]

    settings = {
        "data_dir": data,
        "translation": {
            "model": str(model_dir),
            "beam_size": args.beam,
            "max_length": args.max_length,
            "threads": args.threads,
        },
    }
    from contracts.settings import Settings
    from persistence.session import Database
    from serve_app.tokens import create_token

    token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
    headers = {"X-CLIENT-TOKEN": token, "Content-Type": "application/json"}
    bodies = itertools.cycle([json.dumps(r).encode() for r in requests])

    def through(url: str):
        return load(
            "POST",
            f"{url}/api/v1/translate/process",
            concurrency=args.concurrency,
            duration=args.duration,
            headers=headers,
            data_factory=lambda: next(bodies),
            warmup=32,
        )

    engine = BareCT2(model_dir, requests, args.beam, args.max_length, args.threads)
    with plain_server(settings, ["translation"]) as url:
        # bare before and after the service run (the machine is shared: average out drift)
        bare_same = [engine.sentences_per_s(args.concurrency)]
        bare_32 = engine.sentences_per_s(32)
        res = through(url)
        bare_same.append(engine.sentences_per_s(args.concurrency))
    bare = sum(bare_same) / len(bare_same)
    blank = {"p50 ms": "", "p99 ms": "", "errors": "", "n": ""}
    rows = [
        (f"bare ctranslate2, batches of {args.concurrency}", {"sent/s": round(bare, 1), **blank}),
        ("bare ctranslate2, batches of 32", {"sent/s": round(bare_32, 1), **blank}),
        (f"service (uvicorn, local testing mode), {args.concurrency} clients", _row(res)),
        ("service/bare", {"sent/s": f"{res.rps / bare:.2f}x", **blank}),
    ]
    if args.ray:
        with ray_server(settings, ["translation"]) as url:
            res = through(url)
        rows.append((f"service (Ray Serve), {args.concurrency} clients", _row(res)))
        rows.append(("Ray Serve/bare", {"sent/s": f"{res.rps / bare:.2f}x", **blank}))
    print(
        f"\nmodel: {model_label}; beam {args.beam}, max {args.max_length} tokens; {len(requests)} distinct "
        f"sentences; concurrency={args.concurrency}; duration={args.duration}s; cores={os.cpu_count()}"
    )
    print(table(rows))


def _row(res) -> dict:
    row = res.row()
    return {
        "sent/s": row["req/s"],
        "p50 ms": row["p50 ms"],
        "p99 ms": row["p99 ms"],
        "errors": row["errors"],
        "n": row["n"],
    }


if __name__ == "__main__":
    main()

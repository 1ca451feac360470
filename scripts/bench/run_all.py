"""Every bench, briefly, in one go: one markdown table of ratios written into docs/performance.md.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/run_all.py [--dry-run] [--only text,search,...] [--doc docs/performance.md]

Each bench runs as its own process (so one's Ray or models never slow the next) with short settings and
``--json``; this script reads those files and replaces the block between the ``run_all`` markers of the
document with a table: the figure, its goal from issue #13 where there is one, and the command that produced it.
With ``--only``, the rows of the benches not run are kept from the table already there, marked with their date.
Shorter than the benches' defaults, so noisier: for a figure you quote, run its bench on its own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
BEGIN, END = "<!-- run_all:begin -->", "<!-- run_all:end -->"

Row = tuple[str, str, str]  # figure, value, goal


def _text(d: dict[str, Any]) -> list[Row]:
    rows = []
    for route in ("ner", "sentiment", "classify"):
        r = d[route]
        rows.append(
            (
                f"{route} through Ray Serve / bare engines (16 clients)",
                f"{r['ray req/s'] / r['ray bare req/s']:.2f}x "
                f"(p50 {r['ray p50 ms']:.0f} ms, p99 {r['ray p99 ms']:.0f} ms)",
                "≥ 0.8x" + (", p99 < 250 ms" if route != "classify" else ""),
            )
        )
    return rows


def _overhead(d: dict[str, Any]) -> list[Row]:
    return [
        ("trivial authenticated route, Ray Serve / plain uvicorn", d["auth route: Serve/plain"]["req/s"], "≥ 0.55x")
    ]


def _search(d: dict[str, Any]) -> list[Row]:
    rows = []
    for r in d["scales"]:
        n = f"{r['scale']:,} chunks"
        rows.append(
            (
                f"knowledge-base query through Ray Serve, {n}: p50 / p99",
                f"{r['serve p50 ms']:.1f} / {r['serve p99 ms']:.1f} ms "
                f"({r['serve p50 ms'] / r['bare embed+query p50 ms']:.2f}x bare e5 + Chroma)",
                "p50 ≤ 25 ms, p99 ≤ 60 ms (at 100k)",
            )
        )
        rows.append(
            (
                f"first query through Ray Serve after a restart / after an upload, {n}",
                f"{r['serve first query ms (after a restart)']:.0f} / {r['serve first query ms (after an upload)']:.0f}"
                " ms",
                "≤ 1 s",
            )
        )
        rows.append((f"knowledge-base query under uvicorn, {n}: p50", f"{r['service p50 ms']:.1f} ms", ""))
    return rows


def _speech(d: dict[str, Any]) -> list[Row]:
    fpm = {(r["system"], r["clients"]): r["files_per_min"] for r in d["rows"]}
    rows = []
    for system, name in (("service", "service"), ("service-batched", "service in batches of 8 windows")):
        for clients in sorted({c for _, c in fpm}):
            service = fpm.get((system, clients))
            # the goals: against bare faster-whisper transcribing one file after another, and against the peer
            # at the same concurrency; bare-parallel is the service's own decode layout without Serve
            for other, other_clients, label, goal in (
                ("bare", 1, "bare faster-whisper, sequential", "≥ 1.3x"),
                ("bare-parallel", clients, "bare faster-whisper, the service's decode layout", ""),
                ("fws", clients, "faster-whisper-server", "≥ 1.2x"),
            ):
                if service and fpm.get((other, other_clients)):
                    rows.append(
                        (
                            f"speech files/min, {name}, {clients} client(s) / {label}",
                            f"{service / fpm[(other, other_clients)]:.2f}x",
                            goal if clients > 1 else "",
                        )
                    )
    return rows


def _whisper_batch(d: dict[str, Any]) -> list[Row]:
    by_size = {r["batch"]: r["median_s"] for r in d["rows"]}
    return [
        (
            f"Whisper windows decoded in batches of {size} / one at a time (model only, {d['threads']} threads)",
            f"{by_size[1] / by_size[size]:.2f}x",
            "",
        )
        for size in sorted(by_size)
        if size > 1
    ]


def _stream(d: dict[str, Any]) -> list[Row]:
    return [
        (
            f"live stream, {name}: end of utterance -> final, p50 / p99; RTF p50",
            f"{r['latency p50 s']:.2f} / {r['latency p99 s']:.2f} s; RTF {r['RTF p50']:.2f}",
            "",
        )
        for name, r in d.items()
        if name.endswith("stream(s)")
    ]


MEMORY_GOAL = "≤ 2.0 GiB (2,048 MiB)"


def _memory(d: dict[str, Any]) -> list[Row]:
    return [("idle PSS of `khuluma serve` (all processes), fresh", f"{d['total MB']:,.0f} MiB", MEMORY_GOAL)]


def _memory_loaded(d: dict[str, Any]) -> list[Row]:
    figure = "idle PSS of `khuluma serve` (all processes) after one request of each kind"
    return [(figure, f"{d['total MB']:,.0f} MiB", MEMORY_GOAL)]


def _ask(d: dict[str, Any]) -> list[Row]:
    rows = []
    for shape, by_streams in d["shapes"].items():
        for n, sides in by_streams.items():
            bare, service = sides["bare"], sides["service"]
            rows.append(
                (
                    f"language model {shape} int8 (random weights), {n} stream(s): service / bare CTranslate2, "
                    "TTFT; aggregate tokens/s",
                    f"{service['ttft'] / bare['ttft']:.2f}x ({service['ttft']:.2f} s); "
                    f"{service['aggregate'] / bare['aggregate']:.2f}x ({service['aggregate']:.1f} tok/s)",
                    "",
                )
            )
    return rows


# name -> (script and its brief arguments, how its JSON becomes rows)
BENCHES: dict[str, tuple[list[str], Callable[[dict[str, Any]], list[Row]]]] = {
    "text": (["bench_text.py", "--ray", "--duration", "5"], _text),
    "overhead": (["bench_serve_overhead.py", "--duration", "5"], _overhead),
    "search": (["bench_search.py", "--scales", "10000", "--queries", "100", "--upload-docs", "2", "--ray"], _search),
    "speech": (
        ["bench_transcription.py", "--files", "8", "--sentences", "2", "--clients", "1,8", "--skip", "pipeline"],
        _speech,
    ),
    "whisper-batch": (["bench_whisper_batch.py", "--rounds", "1", "--sizes", "1,8"], _whisper_batch),
    "stream": (["bench_stream.py", "--rounds", "1"], _stream),
    "ask": (["bench_ask.py", "--shapes", "0.5b", "--rounds", "1", "--new-tokens", "32"], _ask),
    "memory": (["idle_memory.py", "--settle", "10"], _memory),
    "memory-loaded": (["idle_memory.py", "--settle", "10", "--after-load"], _memory_loaded),
}


def run(name: str, out: Path) -> tuple[list[Row], str, float]:
    args, to_rows = BENCHES[name]
    command = ["scripts/bench/" + args[0], *args[1:]]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *command, "--json", str(out)], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    seconds = time.monotonic() - started
    shown = " ".join(["python", *command])
    if done.returncode != 0 or not out.exists():
        return [(f"{name}: the bench failed (exit {done.returncode})", "", "")], shown, seconds
    return to_rows(json.loads(out.read_text())), shown, seconds


def markdown(results: list[tuple[list[Row], str, float]], kept: list[str] | None = None) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        f"Written by `scripts/bench/run_all.py` on {today} ({os.cpu_count()} cores, no GPU). Short runs: noisier "
        "than the sections below."
        + (
            " Rows marked with an earlier date are kept from that run (their bench was not run this time)."
            if kept
            else ""
        ),
        "",
        "| figure | value | goal (#13) | command |",
        "|---|---|---|---|",
    ]
    for rows, command, _ in results:
        for figure, value, goal in rows:
            lines.append(f"| {figure} | {value} | {goal} | `{command}` |")
    return "\n".join(lines + (kept or []))


def kept_rows(doc: Path, rerun: list[str]) -> list[str]:
    """The table rows already in ``doc`` whose command is not one of ``rerun``, each marked as from an earlier run,
    with its date (unless it already is)."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        return []
    block = text[text.index(BEGIN) : text.index(END)]
    written = re.search(r"on (\d{4}-\d{2}-\d{2})", block)
    date = written.group(1) if written else "an earlier run"
    kept = []
    for line in block.splitlines():
        command = re.search(r"`(python [^`]+)`", line)
        if line.startswith("| ") and command and command.group(1) not in rerun:
            figure, rest = line[2:].split(" | ", 1)
            kept.append(line if figure.endswith(")_") else f"| {figure} _(earlier run, {date})_ | {rest}")
    return kept


def replace_block(doc: Path, body: str) -> None:
    text = doc.read_text()
    block = f"{BEGIN}\n{body}\n{END}"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n## All benches in one run\n\n" + block + "\n"
    doc.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(BENCHES), help=f"comma list of: {','.join(BENCHES)}")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--dry-run", action="store_true", help="print the table, leave the document alone")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(BENCHES)
    if unknown:
        parser.error(f"unknown bench(es): {', '.join(sorted(unknown))}")
    results = []
    with tempfile.TemporaryDirectory(prefix="khuluma-run-all-") as tmp:
        for name in names:
            print(f"== {name}", flush=True)
            results.append(run(name, Path(tmp) / f"{name}.json"))
            print(f"== {name}: {results[-1][2]:.0f} s", flush=True)
    every = names == list(BENCHES)
    body = markdown(results, None if every or args.dry_run else kept_rows(args.doc, [c for _, c, _ in results]))
    print("\n" + body)
    if not args.dry_run:
        replace_block(args.doc, body)
        print(f"\nwritten to {args.doc}")


if __name__ == "__main__":
    main()

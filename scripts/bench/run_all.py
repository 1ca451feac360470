"""Every bench, briefly, in one go: one markdown table of ratios, with the machine's bare figures beside them, written
into docs/performance.md.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/run_all.py [--dry-run] [--light | --only text,search,...] [--doc docs/performance.md]

``--light`` runs the benches of issue #46, the service's own cost per request
(``--only text,overhead,search,memory,floor,models``): the text routes through Ray Serve against their bare engines,
the trivial authenticated route against plain uvicorn, the knowledge-base query at 10k chunks against bare e5 +
Chroma + BM25, the idle memory, Ray Serve's own floor with no Khuluma code (``bench_serve_floor.py``), and the
memory of the models each loaded once (``models_memory.py``), with the least idle memory that the idle memory's
driver, the floor and the models of the same run allow together. About 10 minutes on 2 cores (docs/performance.md).

Each bench runs as its own process (so one's Ray or models never slow the next) with short settings and
``--json``; this script reads those files and replaces the block between the ``run_all`` markers of the
document with a table: the figure, the bare figure it is a ratio of (measured in the same run, on this machine), its
goal (issue #46 for the service's own cost, else issue #13) where there is one, and the command that produced it.
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

Row = tuple[str, str, str, str]  # figure, value, the bare figure it is a ratio of, goal
LIGHT = ["text", "overhead", "search", "memory", "floor", "models"]  # issue #46: the service's own cost per request


TEXT_GOALS = {
    "ner": "≥ 0.8x (#46), p99 < 250 ms",
    "sentiment": "≥ 0.9x (#46), p99 < 250 ms",
    "classify": "≥ 0.9x (#46)",
}


def _text(d: dict[str, Any]) -> list[Row]:
    rows = []
    for route in ("ner", "sentiment", "classify"):
        r = d[route]
        rows.append(
            (
                f"{route} through Ray Serve / bare engines (16 clients)",
                f"{r['ray req/s'] / r['ray bare req/s']:.2f}x "
                f"({r['ray req/s']:.0f} req/s; p50 {r['ray p50 ms']:.0f} ms, p99 {r['ray p99 ms']:.0f} ms)",
                f"{r['ray bare req/s']:.0f} req/s (engines in a loop, batches of 16)",
                TEXT_GOALS[route],
            )
        )
    return rows


def _overhead(d: dict[str, Any]) -> list[Row]:
    plain, serve = d["auth route: plain uvicorn"], d["auth route: Ray Serve"]
    return [
        (
            "trivial authenticated route, Ray Serve / plain uvicorn (16 clients)",
            f"{d['auth route: Serve/plain']['req/s']} ({serve['req/s']:.0f} req/s)",
            f"{plain['req/s']:.0f} req/s (plain uvicorn)",
            "≥ 0.7x (#46)",
        )
    ]


def _floor(d: dict[str, Any]) -> list[Row]:
    rows = [
        (
            "Ray Serve's own floor, no Khuluma code: an empty route, Serve / plain uvicorn (16 clients)",
            f"{d['serve empty req/s'] / d['plain empty req/s']:.2f}x ({d['serve empty req/s']:.0f} req/s)",
            f"{d['plain empty req/s']:.0f} req/s (plain uvicorn)",
            "Serve's own cost per request, under the authenticated route's 0.7x",
        )
    ]
    for w in d["work"]:
        served, bare = w["serve p50 ms"], w["in-process p50 ms"]
        rows.append(
            (
                f"Ray Serve's own floor: {w['work ms']:g} ms of work in a second replica, 1 client, p50",
                f"{served / bare:.2f}x (Serve's {served - bare:.1f} ms; 0.3x the work: {0.3 * bare:.1f} ms)",
                f"{bare:.1f} ms (the same work in-process)",
                "Serve's own cost, under the knowledge-base query's 1.3x",
            )
        )
    if "idle MiB" in d:
        rows.append(
            (
                "Ray Serve's own floor: idle PSS of Ray and Serve, dashboard on, the 5 replicas empty",
                f"{d['idle MiB']:,.0f} MiB ({d['idle processes']} processes)",
                "",
                "the floor of idle memory, before the driver and the models",
            )
        )
    return rows


def _search(d: dict[str, Any]) -> list[Row]:
    rows = []
    for r in d["scales"]:
        n = f"{r['scale']:,} chunks"
        # issue 46's yardstick: e5's query vector, Chroma's and BM25's 5 best with their texts, in-process
        yardstick = r["stage bare e5 + Chroma + BM25 ms"]
        bare = f"{yardstick:.1f} ms (e5 query + Chroma + BM25, in-process)"
        rows.append(
            (
                f"knowledge-base query through Ray Serve, {n}: p50 / p99",
                f"{r['serve p50 ms']:.1f} / {r['serve p99 ms']:.1f} ms ({r['serve p50 ms'] / yardstick:.2f}x bare)",
                bare,
                "p50 ≤ 1.3x bare (#46); p50 ≤ 25 ms, p99 ≤ 60 ms at 100k (#13)",
            )
        )
        rows.append(
            (
                f"first query through Ray Serve after a restart / after an upload, {n}",
                f"{r['serve first query ms (after a restart)']:.0f} / {r['serve first query ms (after an upload)']:.0f}"
                " ms",
                "",
                "≤ 1 s",
            )
        )
        rows.append((f"knowledge-base query under uvicorn, {n}: p50", f"{r['service p50 ms']:.1f} ms", bare, ""))
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
                            f"{fpm[(other, other_clients)]:.1f} files/min",
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
            f"{by_size[1]:.2f} s a window, one at a time",
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
            "",
        )
        for name, r in d.items()
        if name.endswith("stream(s)")
    ]


MEMORY_GOAL = "≤ 1.5 GB with the dashboard on (#46); ≤ 2.0 GiB (#13)"
MEMORY_GOAL_MIB = 1536  # issue 46's 1.5 GB, read as GiB


def _memory(d: dict[str, Any]) -> list[Row]:
    return [("idle PSS of `khuluma serve` (all processes), fresh", f"{d['total MB']:,.0f} MiB", "", MEMORY_GOAL)]


def _models(d: dict[str, Any]) -> list[Row]:
    figure = "the models and their code, each loaded once, in one process above Ray and Serve's imports"
    goal = "the least any layout that loads them at start adds to Ray Serve's idle floor"
    return [(figure, f"{d['models MiB']:,.0f} MiB", "", goal)]


LEAST_IDLE = ("memory", "floor", "models")  # the benches whose figures of one run make the least idle memory


def least_idle(memory: dict[str, Any], floor: dict[str, Any], models: dict[str, Any]) -> Row:
    """The least idle PSS of ``khuluma serve`` with its deployments: Ray Serve's floor (dashboard on, the five
    deployments empty), the models each loaded once, and the ``khuluma serve`` driver and supervisor, from one run."""
    driver = sum(mib for name, mib in memory["processes"].items() if name.startswith("khuluma serve"))
    least = floor["idle MiB"] + models["models MiB"] + driver
    return (
        "least idle PSS of `khuluma serve`: Ray Serve's floor + the models once + the driver and its supervisor "
        "(no code of the Ingress and Jobs, no second copy of a model)",
        f"{least:,.0f} MiB ({least / MEMORY_GOAL_MIB:.2f}x the goal)",
        f"{floor['idle MiB']:,.0f} + {models['models MiB']:,.0f} + {driver:,.0f} MiB",
        MEMORY_GOAL,
    )


def _memory_loaded(d: dict[str, Any]) -> list[Row]:
    figure = "idle PSS of `khuluma serve` (all processes) after one request of each kind"
    return [(figure, f"{d['total MB']:,.0f} MiB", "", MEMORY_GOAL)]


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
                    f"TTFT {bare['ttft']:.2f} s; {bare['aggregate']:.1f} tok/s",
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
    "floor": (["bench_serve_floor.py", "--duration", "5", "--memory"], _floor),
    "memory-loaded": (["idle_memory.py", "--settle", "10", "--after-load"], _memory_loaded),
    "models": (["models_memory.py"], _models),
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
        out.unlink(missing_ok=True)  # a failed bench's figures are not read (least_idle)
        return [(f"{name}: the bench failed (exit {done.returncode})", "", "", "")], shown, seconds
    return to_rows(json.loads(out.read_text())), shown, seconds


def markdown(results: list[tuple[list[Row], str, float | None]], kept: list[str] | None = None) -> str:
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
        "| figure | value | bare, same run | goal | command | bench's run time |",
        "|---|---|---|---|---|---|",
    ]
    for rows, command, seconds in results:
        for figure, value, bare, goal in rows:
            took = f"{seconds / 60:.1f} min" if seconds is not None else "(its benches')"
            lines.append(f"| {figure} | {value} | {bare} | {goal} | `{command}` | {took} |")
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
            cells = line.strip().strip("|").split(" | ")
            if len(cells) == 4:  # a row of the table before the bare figures and run times were added
                cells = [cells[0], cells[1], "", cells[2], cells[3], ""]
            figure = cells[0].strip()
            if not figure.endswith(")_"):
                cells[0] = f"{figure} _(earlier run, {date})_"
            kept.append("| " + " | ".join(c.strip() for c in cells) + " |")
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
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--only", default=",".join(BENCHES), help=f"comma list of: {','.join(BENCHES)}")
    chosen.add_argument("--light", action="store_true", help=f"issue #46's benches: --only {','.join(LIGHT)}")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--dry-run", action="store_true", help="print the table, leave the document alone")
    args = parser.parse_args()
    names = LIGHT if args.light else [n for n in args.only.split(",") if n]
    unknown = set(names) - set(BENCHES)
    if unknown:
        parser.error(f"unknown bench(es): {', '.join(sorted(unknown))}")
    results: list[tuple[list[Row], str, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="khuluma-run-all-") as tmp:
        for name in names:
            print(f"== {name}", flush=True)
            results.append(run(name, Path(tmp) / f"{name}.json"))
            print(f"== {name}: {results[-1][2]:.0f} s", flush=True)
        figures = [Path(tmp) / f"{name}.json" for name in LEAST_IDLE]
        if all(path.exists() for path in figures):
            memory, floor, models = (json.loads(path.read_text()) for path in figures)
            if "idle MiB" in floor:  # the floor ran with --memory
                command = f"python scripts/bench/run_all.py --only {','.join(LEAST_IDLE)}"
                results.append(([least_idle(memory, floor, models)], command, None))
    total = sum(seconds or 0 for _, _, seconds in results)
    every = names == list(BENCHES)
    body = markdown(results, None if every or args.dry_run else kept_rows(args.doc, [c for _, c, _ in results]))
    print("\n" + body)
    print(f"\nrun time: {total / 60:.1f} min in all")
    if not args.dry_run:
        replace_block(args.doc, body)
        print(f"\nwritten to {args.doc}")


if __name__ == "__main__":
    main()

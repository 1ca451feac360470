"""Batch transcription throughput: files/minute of a batch of N short files fanned out as Ray tasks with 1, 2 and 4
workers (files transcribed at once), vs the same files transcribed one after another by bare faster-whisper.

Everything is real: espeak-ng makes the audio, a local SeaweedFS stores it, files are uploaded with the batch
credential, Ray tasks read them from storage and run the service's transcription pipeline, and results land in
a SQLite database. The bare baseline loads the same Whisper base model (CTranslate2 int8) once and calls
``WhisperModel.transcribe`` on each local file (no storage, no database, no VAD/diarisation extras).

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_batch.py [--files 12] [--workers 1 2 4]
    .venv/bin/python scripts/bench/bench_batch.py --nodes [--files 12]

``--nodes`` compares one Ray node with two (``scripts/bench/_local_ray.py``: real ``ray start`` nodes on this machine,
each with a 1-CPU quota, the per-file tasks asking for 1 CPU each): the same files, the same coordinator, and the
ratio of the two. On a 2-core machine the second node can at best double the work done at once, and it shares
the memory bus and the cores with everything else running; on real machines each node brings its own.

Model loading is excluded on both sides: a warm-up batch runs first (as many files as the largest worker count)
so every Ray worker holds its pipeline, and the bare model transcribes one file before timing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench._speech import CALL_PHRASES as PHRASES  # noqa: E402


def make_audio(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"file-{i:03d}.wav"
        text = f"{PHRASES[i % len(PHRASES)]}. this is file number {i}."
        subprocess.run(["espeak-ng", "-v", "en", "-s", "150", "-w", str(path), text], check=True, capture_output=True)
        paths.append(path)
    return paths


def audio_seconds(paths: list[Path]) -> float:
    import wave

    total = 0.0
    for p in paths:
        with wave.open(str(p)) as w:
            total += w.getnframes() / w.getframerate()
    return total


def bare_faster_whisper(settings, paths: list[Path]) -> float:
    from faster_whisper import WhisperModel

    from engines.speech.whisper.weights import ensure_whisper_base

    model_dir = settings.speech.whisper.model or str(ensure_whisper_base(settings.data_dir))
    model = WhisperModel(
        model_dir, device="cpu", compute_type=settings.speech.whisper.compute_type, cpu_threads=os.cpu_count() or 1
    )

    def run(path: Path) -> str:
        segments, _ = model.transcribe(str(path), language="en", beam_size=settings.speech.whisper.beam_size)
        return " ".join(s.text for s in segments)

    run(paths[0])  # warm-up
    start = time.perf_counter()
    for p in paths:
        run(p)
    return time.perf_counter() - start


def run_batch(settings, db, folder: Path, workers: int, label: str) -> tuple[float, str, int]:
    """Create a batch, upload ``folder`` with its credential, process it with ``workers`` tasks in flight."""
    from cluster.batch import BatchCoordinator
    from cluster.credentials import issue_upload_credential
    from khuluma.cli.batch import upload_directory
    from persistence import batches
    from persistence.models import new_uuid

    batch_id = new_uuid()
    batches.create_batch(
        db,
        batch_id=batch_id,
        customer_id=1,
        project_id=1,
        keychain_id=None,
        language_code="eng",
        bucket=settings.s3.bucket,
    )
    token = issue_upload_credential(settings, batch_id)
    results = upload_directory(token, folder, parallel=4)
    assert all(r.ok for r in results), [r.detail for r in results if not r.ok]
    batch = batches.owned_batch(db, batch_id, customer_id=1)
    assert batch is not None and batches.start(db, batch, [r.key for r in results], diarise=False)
    coordinator = BatchCoordinator(settings.updated({"batch": {"max_parallel": workers}}), db, use_ray=True)
    start = time.perf_counter()
    status = coordinator.run(batch_id)
    elapsed = time.perf_counter() - start
    print(f"  {label}: {len(results)} files, {workers} worker(s): {elapsed:.1f} s ({status})", flush=True)
    return elapsed, status or "?", len(results)


def run_on_nodes(settings, db, folder: Path, warm: Path, nodes: int) -> tuple[float, str, int]:
    """The batch on a fresh local Ray cluster of ``nodes`` nodes with one CPU each; tasks take 1 CPU."""
    import ray

    from scripts.bench._local_ray import LocalCluster, wait_for

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cluster = LocalCluster(temp_dir=Path(tempfile.mkdtemp(prefix="khuluma-bench-ray-")), env=env, dashboard=False)
    try:
        cluster.start_head()
        for _ in range(nodes - 1):
            cluster.start_worker(num_cpus=1)
        ray.init(address=cluster.address, logging_level="WARNING")
        wait_for(lambda: len([n for n in ray.nodes() if n["Alive"]]) == nodes, 120, f"{nodes} Ray nodes")
        per_task = settings.updated({"batch": {"task_cpus": 1}, "speech": {"whisper_cpu_threads": 1}})
        run_batch(per_task, db, warm, nodes, f"warm-up, {nodes} node(s)")
        return run_batch(per_task, db, folder, nodes, f"batch, {nodes} node(s)")
    finally:
        ray.shutdown()
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--nodes", action="store_true", help="compare one Ray node with two (1 CPU each)")
    args = parser.parse_args()

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from cluster.seaweedfs import LocalSeaweedFS
    from contracts.settings import Settings
    from persistence.session import Database

    work = Path(tempfile.mkdtemp(prefix="khuluma-bench-batch-"))
    data_dir = work / "data"
    settings = Settings(data_dir=data_dir, _env_file=None)
    settings.ensure_dirs()
    storage = LocalSeaweedFS(work / "seaweedfs", settings.s3.access_key, settings.s3.secret_key.get_secret_value())
    settings = settings.updated({"s3": {"endpoint_url": storage.start()}})
    try:
        db = Database.migrated(settings.db_url)
        files = make_audio(work / "audio", args.files)
        warm = work / "warm"
        warm.mkdir()
        for p in files[: max(args.workers)]:
            (warm / p.name).write_bytes(p.read_bytes())
        total_audio = audio_seconds(files)
        cores = os.cpu_count() or 1
        print(
            f"{args.files} files, {total_audio:.1f} s of speech in total, {cores} CPU cores, load average "
            f"{os.getloadavg()[0]:.1f} at start"
        )

        if args.nodes:
            one = run_on_nodes(settings, db, work / "audio", warm, 1)
            two = run_on_nodes(settings, db, work / "audio", warm, 2)
            print(f"\n{'mode':<34}{'seconds':>9}{'files/min':>11}{'x realtime':>12}")
            for label, (elapsed, status, n) in (("1 node, 1 CPU", one), ("2 nodes, 1 CPU each", two)):
                print(f"{label:<34}{elapsed:>9.1f}{60 * n / elapsed:>11.1f}{total_audio / elapsed:>12.1f}   {status}")
            print(f"two nodes / one node: {one[0] / two[0]:.2f}x files/min")
            return

        print("bare faster-whisper, sequential ...", flush=True)
        bare = bare_faster_whisper(settings, files)
        print(f"  {bare:.1f} s")

        ray.init(
            address="local",
            num_cpus=max(max(args.workers), cores),
            include_dashboard=False,
            logging_level="WARNING",
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
        )
        run_batch(settings, db, warm, max(args.workers), "warm-up")
        rows = []
        for workers in args.workers:
            elapsed, status, n = run_batch(settings, db, work / "audio", workers, "batch")
            rows.append((workers, elapsed, status, n))
        ray.shutdown()
    finally:
        storage.stop()

    bare_fpm = 60 * len(files) / bare
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end (other processes share these cores)")
    print(f"{'mode':<34}{'seconds':>9}{'files/min':>11}{'x realtime':>12}{'vs bare':>9}")
    print(f"{'bare faster-whisper, sequential':<34}{bare:>9.1f}{bare_fpm:>11.1f}{total_audio / bare:>12.1f}{1.0:>9.2f}")
    for workers, elapsed, status, n in rows:
        fpm = 60 * n / elapsed
        print(
            f"{f'batch, Ray tasks, {workers} worker(s)':<34}{elapsed:>9.1f}{fpm:>11.1f}"
            f"{total_audio / elapsed:>12.1f}{fpm / bare_fpm:>9.2f}   {status}"
        )


if __name__ == "__main__":
    main()

"""Transcription throughput: the Ray Serve service vs bare faster-whisper vs faster-whisper-server, same files.

Every system transcribes the same set of files (espeak-ng English speech, several sentences with pauses per
file) with the same model files (Whisper base, CTranslate2 int8 on CPU) and the same decoding options (beam 5,
word timestamps, Silero VAD), with 1 and with 8 concurrent clients. Printed per run: wall time, real-time factor
(wall seconds per second of audio, aggregate: lower is better), files per minute, mean latency, and the ratio of
each system's files/minute to bare faster-whisper's at the same concurrency and to bare faster-whisper's
sequential (1 client) figure.

Systems:
  bare       faster_whisper.WhisperModel.transcribe in this process (threads for concurrency), its defaults: one
             decode at a time on every core
  bare-parallel  the same model with the service's decode placement on CPU
             (engines.speech.whisper.placement.decode_placement: one CTranslate2 worker per core, decodes side by
             side), so service / bare-parallel is what Serve and the service add
  pipeline   engines.speech.pipeline.TranscriptionPipeline in this process (our engine, no HTTP, no Ray)
  service    POST /api/v2alpha/transcribe/sync/file on a Ray Serve app started here (configs/serve.yaml), with
             the default settings (on CPU: decodes side by side, each request's windows alone)
  service-batched  the same with KHULUMA_SPEECH_WHISPER_BATCH_SIZE=--batch-size (8): concurrent requests' 30 s windows
             are decoded in one batch (engines/speech/whisper/batching.py)
  fws        faster-whisper-server (PyPI) from .venv-fws on the same model directory, if installed there:
             python3 -m venv .venv-fws && .venv-fws/bin/pip install faster-whisper-server

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_transcription.py [--files 8] [--sentences 4] [--skip service,fws]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from _load import json_option, write_json  # noqa: E402
from _plain import free_port  # noqa: E402

from scripts.eval_wer import SENTENCES  # noqa: E402

DECODE = {"beam_size": 5, "word_timestamps": True, "vad_filter": True, "condition_on_previous_text": False}


def make_files(folder: Path, files: int, sentences: int) -> list[tuple[Path, float]]:
    from engines.speech.audio import load_audio
    from scripts.bench._speech import espeak, write_audio

    pool = SENTENCES["eng"][1]
    out = []
    for i in range(files):
        parts = []
        for j in range(sentences):
            text = pool[(i + j) % len(pool)]
            parts += [load_audio(espeak(text, folder / f"s{i}-{j}.wav", "en", 150)), np.zeros(12000, np.float32)]
        audio = np.concatenate(parts)
        path = write_audio(audio, 16000, folder / f"call-{i}.wav")
        out.append((path, audio.size / 16000))
    return out


def run(name: str, fn: Callable[[Path], Any], files: list[tuple[Path, float]], clients: int) -> dict[str, Any]:
    latencies: list[float] = []

    def one(path: Path) -> None:
        t0 = time.perf_counter()
        fn(path)
        latencies.append(time.perf_counter() - t0)

    fn(files[0][0])  # warm-up (model load, first-call costs)
    started = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, [p for p, _ in files]))
    wall = time.perf_counter() - started
    audio = sum(s for _, s in files)
    row = {
        "system": name,
        "clients": clients,
        "files": len(files),
        "audio_s": round(audio, 1),
        "wall_s": round(wall, 2),
        "rtf": round(wall / audio, 3),
        "files_per_min": round(len(files) / wall * 60, 2),
        "mean_latency_s": round(sum(latencies) / len(latencies), 2),
    }
    print(json.dumps(row), flush=True)
    return row


def bare_system(model_dir: Path, threads: int, workers: int = 1) -> Callable[[Path], Any]:
    from faster_whisper import WhisperModel

    model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads, num_workers=workers)

    def transcribe(path: Path) -> str:
        segments, _ = model.transcribe(str(path), language=None, **DECODE)
        return "".join(s.text for s in segments)

    return transcribe


def pipeline_system(settings: Any) -> Callable[[Path], Any]:
    from engines.speech.pipeline import TranscriptionPipeline

    pipeline = TranscriptionPipeline(settings.speech, settings.data_dir)
    return lambda path: pipeline.transcribe(path, None).text


class ServiceSystem:
    """Ray Serve with the transcription deployment only (as configured in configs/serve.yaml)."""

    def __init__(self, settings: Any) -> None:
        from khuluma.cli.serve import load_serve_config, ray_env

        os.environ.update(ray_env())
        import ray
        from ray import serve

        from khuluma.app import build_app
        from persistence.session import Database
        from serve_app.tokens import create_token

        cfg = load_serve_config(ROOT / "configs" / "serve.yaml")
        port = free_port()
        ray.init(address="local", include_dashboard=False, logging_level="ERROR", runtime_env={"env_vars": ray_env()})
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        args = {
            "settings": settings.for_replica(),
            "deployments": cfg["deployments"],
            "capabilities": ["speech"],
        }
        settings.ensure_dirs()  # migrated before the app starts, as `khuluma serve` does (a start-up check)
        self.token = create_token(Database.migrated(settings.db_url), "bench", "bench")[0]
        serve.run(build_app(args), name="khuluma-bench", route_prefix="/", blocking=False)
        self.url = f"http://127.0.0.1:{port}"
        _wait(self.url + "/api/v1/health", 600)
        self.replicas = cfg["deployments"].get("Speech", {})

    def __call__(self, path: Path) -> str:
        import httpx

        with path.open("rb") as f:
            r = httpx.post(
                self.url + "/api/v2alpha/transcribe/sync/file",
                files={"file": (path.name, f)},
                headers={"X-CLIENT-TOKEN": self.token},
                timeout=600,
            )
        r.raise_for_status()
        return r.json()["transcription_text"]

    def close(self) -> None:
        import ray
        from ray import serve

        serve.shutdown()
        ray.shutdown()


class FwsSystem:
    """faster-whisper-server in its own venv, same model directory and decoding options."""

    def __init__(self, model_dir: Path, threads: int, workdir: Path) -> None:
        exe = ROOT / ".venv-fws" / "bin" / "faster-whisper-server"
        if not exe.exists():
            raise FileNotFoundError(f"{exe} (pip install faster-whisper-server into .venv-fws)")
        config = workdir / "fws.yaml"
        config.write_text(
            json.dumps(
                {
                    "models": [
                        {
                            "name": "whisper-base",
                            "path": str(model_dir),
                            "model_options": {"device": "cpu", "compute_type": "int8", "cpu_threads": threads},
                            "transcribe_options": DECODE,
                        }
                    ]
                }
            )
        )  # JSON is YAML
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _wait(self.url + "/health", 120)

    def __call__(self, path: Path) -> str:
        import httpx

        with path.open("rb") as f:
            r = httpx.post(
                self.url + "/v1/audio/transcriptions",
                files={"file": (path.name, f)},
                data={"model_name": "whisper-base"},
                timeout=600,
            )
        r.raise_for_status()
        return r.json()["text"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _wait(url: str, seconds: float) -> None:
    import httpx

    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{url} did not answer within {seconds:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--sentences", type=int, default=4, help="sentences per file (about 4 s each)")
    parser.add_argument("--clients", default="1,8")
    parser.add_argument(
        "--skip",
        default="",
        help="comma list of systems to skip: bare,bare-parallel,pipeline,service,service-batched,fws",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="speech.whisper_batch_size of service-batched")
    json_option(parser)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    clients = [int(c) for c in args.clients.split(",")]

    from contracts.settings import Settings
    from engines.speech.whisper.placement import decode_placement
    from engines.speech.whisper.weights import ensure_whisper_base

    workdir = Path(tempfile.mkdtemp(prefix="khuluma-bench-asr-"))
    settings = Settings(data_dir=workdir / "data", _env_file=None)
    model_dir = ensure_whisper_base(settings.data_dir)
    threads = os.cpu_count() or 1
    files = make_files(workdir, args.files, args.sentences)
    print(
        f"{len(files)} files, {sum(s for _, s in files):.1f} s of audio, {threads} CPU threads per model, "
        f"decoding {DECODE}",
        flush=True,
    )
    placement = decode_placement(
        settings.speech.whisper, 1
    )  # (decodes side by side, threads each), as the service on CPU
    rows: list[dict[str, Any]] = []
    try:
        systems: list[tuple[str, Callable[[], Any]]] = [
            ("bare", lambda: bare_system(model_dir, threads)),
            ("bare-parallel", lambda: bare_system(model_dir, placement[1], workers=placement[0])),
            ("pipeline", lambda: pipeline_system(settings)),
            ("service", lambda: ServiceSystem(settings)),
            (
                "service-batched",
                lambda: ServiceSystem(settings.updated({"speech": {"whisper_batch_size": args.batch_size}})),
            ),
            ("fws", lambda: FwsSystem(model_dir, threads, workdir)),
        ]
        for name, factory in systems:
            if name in skip:
                continue
            try:
                system = factory()
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                print(f"{name}: not run ({type(exc).__name__}: {exc})", flush=True)
                continue
            try:
                for c in clients:
                    rows.append(run(name, system, files, c))
            finally:
                if hasattr(system, "close"):
                    system.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    base = {r["clients"]: r["files_per_min"] for r in rows if r["system"] == "bare"}
    sequential = base.get(1, float("nan"))
    print(
        f"\n{'system':15} {'clients':>7} {'wall s':>8} {'RTF':>7} {'files/min':>10} {'latency s':>10} {'vs bare':>8} "
        f"{'vs bare sequential':>19}"
    )
    for r in rows:
        ratio = r["files_per_min"] / base[r["clients"]] if r["clients"] in base else float("nan")
        print(
            f"{r['system']:15} {r['clients']:7d} {r['wall_s']:8.1f} {r['rtf']:7.3f} {r['files_per_min']:10.2f} "
            f"{r['mean_latency_s']:10.2f} {ratio:8.2f} {r['files_per_min'] / sequential:19.2f}"
        )
    write_json(args.json, {"rows": rows})


if __name__ == "__main__":
    main()

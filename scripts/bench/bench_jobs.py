"""Async v1 jobs: files/minute and completion latency through the service's job path vs calling the transcription
deployment directly on the same files.

Service side (one process, no Ray cluster: the real deployments under Serve's local testing mode,
``khuluma.app.build_local``): the FastAPI app uploads each file (base64 JSON), places the job with a webhook to
a real local HTTP receiver, and the ``Jobs`` deployment claims, transcribes (through its handle to the real
``Speech`` deployment, Whisper base int8), stores the result and delivers the signed webhook. Timed from the
first upload to the last webhook received. Bare side: ``SpeechClient.transcribe`` on the same files one
after another, over the same handle, measured before and after the service run (mean of the two, since the load
of a shared machine drifts).

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_jobs.py [--files 6] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench._speech import CALL_PHRASES as PHRASES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=1, help="jobs.concurrency of the worker")
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from contracts.payloads import Blob
    from contracts.settings import Settings
    from contracts.speech import SpeechClient, TranscribeRequest
    from khuluma.app import build_local
    from persistence.session import Database
    from serve_app.app import create_app
    from serve_app.context import Clients, build_context, get_context
    from serve_app.tokens import create_token

    tmp = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    files = []
    for i in range(args.files):
        path = tmp / f"call-{i}.wav"
        subprocess.run(
            ["espeak-ng", "-v", "en", "-s", "150", "-w", str(path), PHRASES[i % len(PHRASES)]],
            check=True,
            capture_output=True,
        )
        files.append(path)

    settings = Settings(data_dir=tmp / "data", _env_file=None).updated(
        {"webhooks": {"allow_private": True}, "jobs": {"concurrency": args.concurrency, "poll_seconds": 0.5}}
    )
    settings.ensure_dirs()
    db = Database.migrated(settings.db_url)
    handles = build_local(settings, ["speech", "jobs"])  # the Jobs worker loop starts here
    transcription = SpeechClient(handles["speech"])

    def transcribe(path: Path) -> None:
        asyncio.run(
            transcription.transcribe(
                TranscribeRequest(
                    audio=Blob(data=path.read_bytes(), size=path.stat().st_size), file_name=path.name, language="eng"
                )
            )
        )

    transcribe(files[0])  # warm

    def run_bare() -> float:
        t0 = time.perf_counter()
        for path in files:
            transcribe(path)
        return time.perf_counter() - t0

    bare_before = run_bare()

    received: dict[str, float] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received[self.headers["X-Khuluma-Upload-Id"]] = time.perf_counter()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_port}/hook"

    context = build_context(settings, Clients.from_handles(settings, **handles))
    app = create_app(settings)
    app.dependency_overrides[get_context] = lambda: context
    client = TestClient(app)
    token = create_token(db, "bench")[0]
    headers = {"X-CLIENT-TOKEN": token}

    placed: dict[str, float] = {}
    t0 = time.perf_counter()
    for path in files:
        data = path.read_bytes()
        up = client.post(
            "/api/v1/transport/file-upload",
            headers=headers,
            json={"file_name": path.name, "audio_blob": base64.b64encode(data).decode(), "file_size": len(data)},
        ).json()
        placed[up["upload_id"]] = time.perf_counter()
        r = client.post(
            f"/api/v1/transcribe/process/{up['upload_id']}",
            headers=headers,
            json={"webhook": hook, "language_code": "eng"},
        )
        assert r.status_code == 200, r.text
    while len(received) < len(files):
        time.sleep(0.05)
    service = max(received.values()) - t0
    server.shutdown()
    bare = (bare_before + run_bare()) / 2  # before and after the service run: the machine's load drifts

    latencies = [received[u] - placed[u] for u in placed]
    print(f"{args.files} files, worker concurrency {args.concurrency}")
    print(f"{'':<34}{'seconds':>10}{'files/min':>12}")
    print(f"{'bare Speech.transcribe':<34}{bare:>10.2f}{60 * args.files / bare:>12.1f}")
    print(f"{'async jobs (upload->webhook)':<34}{service:>10.2f}{60 * args.files / service:>12.1f}")
    print(
        f"ratio service/bare time: {service / bare:.2f}; placement->webhook latency p50 "
        f"{statistics.median(latencies):.2f} s, max {max(latencies):.2f} s"
    )


if __name__ == "__main__":
    main()

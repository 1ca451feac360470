"""Which project files one request runs: the traces of docs/architecture.md, counted from the code itself.

Builds the ingress and the deployments a route needs in this process (Serve's local testing mode, as the fast
tests do), sends each route once to warm it up, then once more with a call tracer on every thread, and lists the
project files whose functions ran for that second request, in the order they first ran. ``tests/unit/
test_architecture_doc.py`` checks that docs/architecture.md states these counts.

Run: ``.venv/bin/python scripts/trace_routes.py`` (``--json`` for the lists as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import wave
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PACKAGES = ("khuluma", "serve_app", "contracts", "deployments", "engines", "cluster", "runtime", "persistence")


class CallTracer:
    """Records the project files whose functions are called while ``recording`` is on, on every thread started
    after :meth:`install` (Serve's local-mode replicas and the test client's portal start later)."""

    def __init__(self) -> None:
        self.recording = False
        self.files: dict[str, None] = {}  # insertion-ordered set

    def _trace(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.recording and event == "call":
            name = frame.f_code.co_filename
            if name.startswith(str(ROOT)):
                relative = Path(name).relative_to(ROOT).as_posix()
                if relative.split("/", 1)[0] in PACKAGES:
                    self.files.setdefault(relative, None)
        return None  # no line events: calls only

    def install(self) -> None:
        threading.setprofile(self._trace)
        sys.setprofile(self._trace)

    def trace(self, send: Callable[[], Any]) -> list[str]:
        self.files.clear()
        self.recording = True
        try:
            send()
        finally:
            self.recording = False
        return list(self.files)


def _speech_wav(directory: Path) -> Path:
    """Two seconds of a tone: the route's path is what is traced, not what Whisper makes of it."""
    import numpy as np

    path = directory / "tone.wav"
    t = np.arange(32000) / 16000
    samples = (0.2 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(samples.tobytes())
    return path


def trace_routes() -> dict[str, list[str]]:
    # Serve's throughput-optimised mode (``khuluma serve``'s Ray environment, which a test session may have exported
    # before running this) runs the handle's router in the caller's loop, so the local app's handles could not be
    # fetched synchronously here: this script calls them from plain threads, as the fast tests do.
    os.environ.pop("RAY_SERVE_THROUGHPUT_OPTIMIZED", None)
    tracer = CallTracer()
    tracer.install()
    from fastapi.testclient import TestClient

    from contracts.settings import Settings
    from khuluma.app import build_local
    from persistence.session import Database, migrate
    from serve_app.app import create_app
    from serve_app.context import Clients, build_context, get_context
    from serve_app.tokens import create_token

    data = Path(tempfile.mkdtemp(prefix="khuluma-trace-"))
    settings = Settings(data_dir=data, _env_file=None)
    settings.ensure_dirs()
    migrate(settings.db_url)
    token = create_token(Database(settings.db_url), "trace", "default")[0]
    context = build_context(
        settings, Clients.from_handles(settings, **build_local(settings, ["text", "search", "speech"]))
    )
    app = create_app(settings)
    app.dependency_overrides[get_context] = lambda: context
    client = TestClient(app, raise_server_exceptions=False)
    headers = {"X-CLIENT-TOKEN": token}
    kb = client.post("/api/v1/search/knowledgebase", headers=headers, json={"knowledgebase_name": "trace"}).json()["id"]
    document = "Ward 12 has a new water supply. The clinic opens at eight on Mondays."
    files = {"file": ("clinic.txt", document.encode(), "text/plain")}
    added = client.post(f"/api/v1/search/knowledgebase/{kb}/document", headers=headers, files=files)
    assert added.status_code == 200, added.text
    wav = _speech_wav(data)

    def ner() -> None:
        body = {"encoded_text": "Cyril Ramaphosa visited Durban on Monday."}
        assert client.post("/api/v1/entity_recognition/process", headers=headers, json=body).status_code == 200

    questions = iter(["When does the clinic open?", "Which ward has new water?"])

    def query() -> None:  # a new question each time: a repeated one's vector is reused (RecentQueries), not embedded
        body = {"query": next(questions), "top_k": 2}
        answer = client.post(f"/api/v1/search/knowledgebase/{kb}/query", headers=headers, json=body)
        assert answer.status_code == 200, answer.text

    def transcribe() -> None:
        with wav.open("rb") as audio:
            files = {"file": ("tone.wav", audio, "audio/wav")}
            answer = client.post("/api/v2alpha/transcribe/sync/file?lang_code=eng", headers=headers, files=files)
        assert answer.status_code == 200, answer.text

    with wav.open("rb") as audio:
        pcm = audio.read()[44:] + bytes(16000)  # the tone, then half a second of silence: a segment ends

    def live() -> None:
        with client.websocket_connect("/ws/stream-transcribe?lang_code=eng", headers=headers) as ws:
            assert ws.receive_json()["type"] == "ready"
            for i in range(0, len(pcm), 3200):  # 100 ms frames
                ws.send_bytes(pcm[i : i + 3200])
            ws.send_text("EOS")
            while ws.receive_json()["type"] != "final":
                pass

    routes = {"ner": ner, "knowledge-base query": query, "sync transcription": transcribe, "live session": live}
    out = {}
    for name, send in routes.items():
        send()  # warm: models loaded, caches filled
        out[name] = tracer.trace(send)
    client.close()
    return out


HTTP_ROUTES = ("ner", "knowledge-base query", "sync transcription")


def summary(traces: dict[str, list[str]]) -> dict[str, Any]:
    """The files every traced HTTP route runs (the edge: authentication, admission, metrics, usage) and, per route
    (the live session's WebSocket included), the files of its own: those not in that edge."""
    http = [traces[name] for name in HTTP_ROUTES]
    shared = [f for f in http[0] if all(f in files for files in http)]
    routes = {
        name: {"total": len(files), "own": [f for f in files if f not in shared]} for name, files in traces.items()
    }
    return {"shared": shared, "routes": routes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    result = summary(trace_routes())
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"\nshared by every HTTP route: {len(result['shared'])} files")
    for file in result["shared"]:
        print(f"  {file}")
    for name, route in result["routes"].items():
        print(f"\n{name}: {route['total']} files, {len(route['own'])} of its own")
        for file in route["own"]:
            print(f"  {file}")


if __name__ == "__main__":
    main()

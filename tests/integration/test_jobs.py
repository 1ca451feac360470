"""Async v1 jobs through the real Ray Serve application: upload -> process (with a webhook to a local receiver)
-> poll get until done; another customer's upload is not found."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from cluster.webhooks import verify
from serve_app.services.jobs import NOT_PROCESSED
from serve_app.tokens import TokenVerifier
from tests.tools import require_tool
from tests.unit.test_jobs import SPOKEN, Receiver

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    require_tool("espeak-ng")
    path: Path = tmp_path_factory.mktemp("jobs-audio") / "weather.wav"
    subprocess.run(["espeak-ng", "-v", "en", "-s", "150", "-w", str(path), SPOKEN], check=True, capture_output=True)
    return path.read_bytes()


def test_async_job_through_serve(serve_url: str, make_token, db, speech: bytes) -> None:
    acme, other = make_token("jobs-acme"), make_token("jobs-other")
    h = {"X-CLIENT-TOKEN": acme}
    r = httpx.post(
        f"{serve_url}/api/v1/transport/file-upload",
        headers=h,
        timeout=60,
        json={"file_name": "weather.wav", "audio_blob": base64.b64encode(speech).decode(), "file_size": len(speech)},
    )
    assert r.status_code == 200, r.text
    upload_id = r.json()["upload_id"]

    other_h = {"X-CLIENT-TOKEN": other}
    assert httpx.post(f"{serve_url}/api/v1/transcribe/{upload_id}/get", headers=other_h, timeout=30).status_code == 404
    assert (
        httpx.post(
            f"{serve_url}/api/v1/transcribe/process/{upload_id}", headers=other_h, json={}, timeout=30
        ).status_code
        == 404
    )

    receiver = Receiver().start()
    try:
        r = httpx.post(
            f"{serve_url}/api/v1/transcribe/process/{upload_id}", headers=h, timeout=60, json={"webhook": receiver.url}
        )
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 300
        while True:
            got = httpx.post(f"{serve_url}/api/v1/transcribe/{upload_id}/get", headers=h, timeout=30)
            assert got.status_code == 200
            if got.json() != {"message": NOT_PROCESSED}:
                break
            assert time.monotonic() < deadline, "job did not finish in 5 minutes"
            time.sleep(1)
        done = got.json()
        assert done["status"] == "completed", done
        assert done["language_id"] == "eng"  # auto-detected
        heard = {w.strip(".,") for w in done["text"].lower().split()}
        assert len(heard & {"weather", "today", "sunny", "light", "breeze", "north"}) >= 3, done

        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.2)
        headers, body = receiver.received[0]
        secret = TokenVerifier(db).verify(acme).webhook_secret
        assert verify(secret, headers["X-Khuluma-Timestamp"], body, headers["X-Khuluma-Signature"])
        payload = json.loads(body)
        assert (payload["upload_id"], payload["status_code"]) == (upload_id, 200)
        assert payload["postprocessed_text"] == done["postprocessed_text"]
    finally:
        receiver.stop()


def test_an_async_job_in_a_language_routed_to_a_ctc_model(serve_url: str, make_token, speech: bytes) -> None:
    """The session application routes isiXhosa to a tiny CTC model (tests/conftest.py): the job runs on it."""
    h = {"X-CLIENT-TOKEN": make_token("jobs-ctc")}
    blob = base64.b64encode(speech).decode()
    upload = httpx.post(
        f"{serve_url}/api/v1/transport/file-upload",
        headers=h,
        timeout=60,
        json={"file_name": "call.wav", "audio_blob": blob, "file_size": len(speech)},
    ).json()["upload_id"]
    r = httpx.post(
        f"{serve_url}/api/v1/transcribe/process/{upload}", headers=h, timeout=60, json={"language_code": "xho"}
    )
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 300
    while (got := httpx.post(f"{serve_url}/api/v1/transcribe/{upload}/get", headers=h, timeout=30).json()) == {
        "message": NOT_PROCESSED
    }:
        assert time.monotonic() < deadline, "job did not finish in 5 minutes"
        time.sleep(1)
    assert got["status"] == "completed" and got["language_id"] == "xho", got
    assert got["text"].startswith("ngiyabonga")  # the CTC model's words, not Whisper's

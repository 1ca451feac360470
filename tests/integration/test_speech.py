"""Transcription through the real Ray Serve application (few tests: each one costs real CPU time)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from scripts.eval_wer import word_errors
from tests.speechdata import convert, espeak

pytestmark = pytest.mark.integration

TEXT = "Thank you for calling, your payment has been received."


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("integration-audio")
    wav = espeak(TEXT, folder / "thanks.wav")
    return {
        "wav": wav,
        "mp3": convert(wav, "mp3", folder),
        "opus": convert(wav, "opus", folder),
        "aiff": convert(wav, "aiff", folder),
    }


@pytest.fixture(scope="module")
def headers(make_token) -> dict[str, str]:
    return {"X-CLIENT-TOKEN": make_token("serve-speech", "calls")}


def _wer(text: str) -> float:
    errors, words = word_errors(TEXT, text)
    return errors / words


def test_sync_file_fast_and_v1_through_serve(serve_url: str, headers, audio) -> None:
    with httpx.Client(base_url=serve_url, headers=headers, timeout=300) as client:
        r = client.post(
            "/api/v2alpha/transcribe/sync/file?diarise=true",
            files={"file": ("thanks.mp3", audio["mp3"].read_bytes(), "audio/mpeg")},
        )
        assert r.status_code == 200, r.text
        record = r.json()
        assert record["language_code"] == "eng" and record["mime_type"] == "audio/mpeg"
        assert _wer(record["transcription_text"]) <= 0.3, record["transcription_text"]
        assert len(record["diarisation_result"]["speaker_ids"]) == len(record["words"]) > 0

        r = client.post(
            "/api/v2alpha/transcribe/fast?lang_code=eng", files={"upload": ("thanks.opus", audio["opus"].read_bytes())}
        )
        assert r.status_code == 200, r.text
        assert _wer(r.json()["text"]) <= 0.3

        r = client.post(
            "/v1/transcribe/sync?translate=true&lang_code=eng",
            files={"file": ("thanks.aiff", audio["aiff"].read_bytes())},
        )
        assert r.status_code == 200, r.text
        assert r.json()["translation"] == r.json()["transcription_text"]

        blob = base64.b64encode(audio["wav"].read_bytes()).decode()
        r = client.post("/api/v1/transcribe/sync", json={"file_name": "t.wav", "audio_blob": blob, "file_size": 0})
        assert r.status_code == 200, r.text
        assert r.json()["language_id"] == "eng" and r.headers["Deprecation"] == "true"


def test_errors_through_serve(serve_url: str, headers) -> None:
    with httpx.Client(base_url=serve_url, headers=headers, timeout=120) as client:
        r = client.post("/api/v2alpha/transcribe/sync/file", files={"file": ("x.ogg", b"definitely not audio" * 9)})
        assert r.status_code == 415
        r = client.post("/api/v2alpha/transcribe/fast?lang_code=sot", files={"upload": ("x.wav", b"RIFF0000")})
        assert r.status_code == 400 and "KHULUMA_SPEECH_LANGUAGE_MODELS" in r.json()["detail"]
        r = client.post("/api/v1/transcribe/sync", json={"file_name": "x", "audio_blob": "***", "file_size": 0})
        assert r.status_code == 400


def test_stream_through_serve(serve_url: str, headers, audio) -> None:
    from websockets.sync.client import connect

    from engines.speech.audio import load_audio

    pcm = (np.clip(load_audio(audio["wav"]), -1, 1) * 32767).astype("<i2").tobytes()
    url = serve_url.replace("http://", "ws://") + "/ws/stream-transcribe?lang_code=eng"
    with connect(url, additional_headers=headers, open_timeout=60, close_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        for i in range(0, len(pcm), 6400):
            ws.send(pcm[i : i + 6400])
        ws.send("EOS")
        while True:
            message = json.loads(ws.recv(timeout=300))
            if message["type"] == "final":
                break
            assert message["type"] in ("partial", "segment"), message
    assert _wer(message["text"]) <= 0.3, message["text"]


def test_khuluma_stream_through_serve(serve_url: str, headers, audio) -> None:
    """The terminal client: protocol events as JSON lines (partials before the final), the transcript as text,
    and a clear message for a token the service refuses."""
    from typer.testing import CliRunner

    from khuluma.cli import app

    runner = CliRunner()
    env = {"KHULUMA_TOKEN": headers["X-CLIENT-TOKEN"], "KHULUMA_URL": serve_url}
    as_json = runner.invoke(app, ["stream", str(audio["mp3"]), "--json", "--speed", "0", "--lang", "eng"], env=env)
    assert as_json.exit_code == 0, as_json.output
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ready" and kinds[-1] == "final" and "partial" in kinds[:-1]
    assert _wer(events[-1]["text"]) <= 0.3, events[-1]["text"]

    as_text = runner.invoke(app, ["stream", str(audio["wav"]), "--speed", "0"], env=env)
    assert as_text.exit_code == 0, as_text.output
    assert _wer(as_text.stdout) <= 0.3, as_text.stdout  # the finished segments, one per line
    assert "s of audio, language eng" in as_text.stderr

    refused = runner.invoke(app, ["stream", str(audio["wav"]), "--token", "kh_not-a-token"], env=env)
    assert refused.exit_code == 1 and "refused the stream (HTTP 401)" in refused.stderr

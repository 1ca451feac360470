"""The self-hosted ("Your Cloud") profile routes (``/health``, ``/v1/translate``, ``/v1/transcribe``) and the one
credential reader behind every route family (``serve_app.auth.presented_token``)."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
import soundfile

from contracts.errors import Unauthenticated
from contracts.wer import word_error_rate
from persistence.models import UsageRecord
from serve_app.auth import presented_token
from tests.speechdata import espeak, read_pcm

TEXT = "Good morning, how can I help you today?"


def _basic(token: str, user: str = "admin") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


# --- the credential reader --------------------------------------------------------------------------------------


def test_presented_token_reads_every_scheme() -> None:
    assert presented_token({"x-client-token": "t1"}) == "t1"
    assert presented_token({"authorization": "Bearer t2"}) == "t2"
    assert presented_token({"authorization": "bearer   t2 "}) == "t2"
    assert presented_token({"authorization": _basic("t3")["Authorization"]}) == "t3"
    assert presented_token({"authorization": _basic("t:4", user="")["Authorization"]}) == "t:4"
    assert presented_token({"x-api-key": "t5"}) == "t5"
    assert presented_token({"x-client-token": "first", "authorization": "Bearer second"}) == "first"
    assert presented_token({}) is None and presented_token({"authorization": "Bearer "}) is None
    assert presented_token({"authorization": "Basic " + base64.b64encode(b"user-only").decode()}) is None
    with pytest.raises(Unauthenticated, match="Malformed HTTP Basic"):
        presented_token({"authorization": "Basic !!not-base64!!"})


# --- routes -----------------------------------------------------------------------------------------------------


def test_health_needs_no_token(local_app) -> None:
    r = local_app().get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_translate_answers_the_honest_503_offline(local_app, make_token) -> None:
    client = local_app()
    token = make_token("cloud-co", "profile")
    body = {"text": "Ngiyabonga kakhulu", "src_lang": "zul_Latn", "tgt_lang": "eng_Latn"}
    r = client.post("/v1/translate", json=body, headers=_basic(token))
    assert r.status_code == 503 and "No translation model is installed" in r.json()["detail"]
    same = client.post("/v1/translate", json=body | {"tgt_lang": "zul_Latn"}, headers={"X-CLIENT-TOKEN": token})
    assert same.status_code == 200 and same.json() == {"translated_text": "Ngiyabonga kakhulu"}
    bad = client.post("/v1/translate", json=body | {"src_lang": "zulu"}, headers=_basic(token))
    assert bad.status_code == 400 and "field 'src_lang'" in bad.json()["detail"]
    empty = client.post("/v1/translate", json=body | {"text": " "}, headers=_basic(token))
    assert empty.status_code == 400 and "field 'text'" in empty.json()["detail"]


def test_profile_auth_refusals(local_app, make_token) -> None:
    client = local_app()
    body = {"text": "x", "src_lang": "zul_Latn", "tgt_lang": "zul_Latn"}
    missing = client.post("/v1/translate", json=body)
    assert missing.status_code == 401 and "HTTP Basic" in missing.json()["detail"]
    wrong = client.post("/v1/translate", json=body, headers=_basic("not-a-token"))
    assert wrong.status_code == 401 and "Invalid credentials" in wrong.json()["detail"]
    malformed = client.post("/v1/translate", json=body, headers={"Authorization": "Basic %%%"})
    assert malformed.status_code == 401 and set(malformed.json()) == {"detail"}
    assert client.post("/v1/translate", json=body, headers=_basic(make_token())).status_code == 200


@pytest.fixture()
def speech_8k(tmp_path: Path) -> Path:
    """The test sentence at 8 kHz (telephone rate): any sample rate is accepted, the decoder resamples."""
    samples, rate = read_pcm(espeak(TEXT, tmp_path / "hello.wav"))
    positions = np.arange(0, len(samples), rate / 8000)
    narrow = np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)
    out = tmp_path / "hello-8k.wav"
    soundfile.write(out, narrow, 8000, subtype="PCM_16")
    return out


def test_transcribe_dry_run_and_real(local_app, make_token, speech_8k: Path) -> None:
    client = local_app(["speech"])
    headers = _basic(make_token("cloud-co", "calls"))
    audio = speech_8k.read_bytes()
    dry = client.post(
        "/v1/transcribe?lang_code=en&enable_dry_run=true", files={"file": ("a.wav", audio)}, headers=headers
    )
    assert dry.status_code == 200, dry.text
    data = dry.json()["data"]
    assert dry.json()["success"] is True and data["dry_run"] is True
    assert data["language_code"] == "eng" and data["upload_file_size"] == len(audio)
    assert data["transcription_text"] == "" and data["audio_length_seconds"] is None
    refused = client.post(
        "/v1/transcribe?lang_code=zul&enable_dry_run=true", files={"file": ("a.wav", audio)}, headers=headers
    )
    assert refused.status_code == 400 and "lang_code" in refused.json()["detail"]

    r = client.post(
        "/v1/transcribe?lang_code=eng&enable_translation=true&enable_diarisation=true",
        files={"file": ("call.wav", audio)},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["dry_run"] is False and data["language_code"] == "eng" and data["sample_rate"] == 8000
    assert word_error_rate(TEXT, data["transcription_text"]) <= 0.35, data["transcription_text"]
    assert data["translation"] == data["transcription_text"]  # English audio: its own translation
    assert data["words"] and data["diarisation_result"]["speaker_ids"]
    client.context.usage.flush_now()
    with client.context.db.session() as s:
        rows = s.query(UsageRecord).filter(UsageRecord.route == "profile_transcribe").all()
    assert [r.status for r in rows].count("successful") == 1 and "failed" in [r.status for r in rows]
    plain = client.post("/v1/transcribe?lang_code=eng", files={"file": ("call.wav", audio)}, headers=headers)
    assert plain.status_code == 200 and plain.json()["data"]["diarisation_result"] is None

"""Async v1 jobs: routes, the durable queue, the real Jobs deployment with the real Speech deployment
(faster-whisper) under Serve's local testing mode, and signed webhook deliveries to a real HTTP receiver on a
loopback port."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from cluster.webhooks import check_webhook_url, retry_delay, sign, verify
from contracts.errors import (
    InvalidInput,
    ModelMissing,
    NotAudio,
    TimedOut,
    TooLarge,
    Unavailable,
    UnsupportedLanguage,
)
from contracts.jobs import JobResult
from contracts.settings import Settings
from khuluma.app import build_local
from persistence import jobs as job_queue
from persistence.models import Upload, UsageRecord, utcnow
from persistence.session import Database
from scripts.bench._plain import free_port
from serve_app.services.jobs import NOT_PROCESSED, decode_audio_blob
from serve_app.tokens import create_token, webhook_secret_for
from tests.conftest import client_for
from tests.tools import require_tool

SPOKEN = "The weather today is sunny with a light breeze from the north."
# Quick retries; the worker wakes when work is due (next_due, wake()), so it hardly ever needs to poll.
FAST: dict[str, Any] = {
    "webhooks": {
        "allow_private": True,
        "backoff_seconds": 0.3,
        "backoff_max_seconds": 1.0,
        "retry_seconds": 60.0,
        "timeout_seconds": 5.0,
    },
    "jobs": {"poll_seconds": 1.0},
}


# --------------------------------------------------------------------------- helpers


def wait_until(predicate: Callable[[], Any], timeout: float = 180.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")


class Receiver:
    """A real HTTP server on a loopback port that records webhook deliveries."""

    def __init__(self, port: int | None = None, status: int = 200) -> None:
        self.port = port or free_port()
        self.status = status
        self.received: list[tuple[dict[str, str], bytes]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/khuluma"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append((dict(self.headers.items()), body))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def upload_row(db: Database, path: Path, token: tuple[str, Any]) -> str:
    info = token[1]
    with db.session() as s:
        row = Upload(
            customer_id=info.customer_id,
            project_id=info.project_id,
            token_id=info.id,
            file_name=path.name,
            path=str(path),
            size_bytes=path.stat().st_size,
        )
        s.add(row)
        s.flush()
        return row.id


def job(db: Database, upload_id: str) -> Upload:
    with db.session() as s:
        row = s.get(Upload, upload_id)
        assert row is not None
        return row


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("espeak-ng")
    require_tool("sox")
    out = tmp_path_factory.mktemp("speech") / "weather.wav"
    wav = subprocess.run(
        ["espeak-ng", "-v", "en", "-s", "150", "--stdout", SPOKEN], check=True, capture_output=True
    ).stdout
    subprocess.run(["sox", "-t", "wav", "-", "-r", "16000", "-c", "1", "-b", "16", str(out)], input=wav, check=True)
    return out


@pytest.fixture(scope="module")
def whisper_base(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Whisper base unpacked once, so each test's data directory does not unpack its own copy."""
    from engines.speech.whisper.weights import ensure_whisper_base

    return str(ensure_whisper_base(tmp_path_factory.mktemp("whisper")))


def fresh_settings(
    tmp_path_factory: pytest.TempPathFactory, whisper_model: str | None = None, **changes: Any
) -> Settings:
    """Settings on a new data directory (its own database, migrated) with quick retries, then ``changes``."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("jobs-data"), _env_file=None).updated(FAST)
    settings = settings.updated({"speech": {"whisper_model": whisper_model}, **changes})
    settings.ensure_dirs()
    Database.migrated(settings.db_url)
    return settings


@pytest.fixture()
def start_worker() -> Callable[..., dict[str, Any]]:
    """Start the real Jobs deployment (and, unless told otherwise, the Speech deployment it calls) under
    Serve's local testing mode; returns the handles."""

    def start(settings: Settings, capabilities: tuple[str, ...] = ("speech", "jobs")) -> dict[str, Any]:
        return build_local(settings, list(capabilities))

    return start


# --------------------------------------------------------------------------- pure parts


def test_webhook_url_policy() -> None:
    for bad in ("ftp://example.org/x", "example.org/hook", "http:///nohost", "javascript:alert(1)", "http://x:99999/"):
        with pytest.raises(InvalidInput, match="webhook"):
            check_webhook_url(bad, allow_private=True)
    for private in (
        "http://127.0.0.1:8000/h",
        "http://localhost/h",
        "http://10.1.2.3/h",
        "http://192.168.0.5/h",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/h",
        "http://[::ffff:127.0.0.1]/h",
        "https://100.64.0.1/h",
        "http://0.0.0.0/h",
    ):
        with pytest.raises(InvalidInput, match=r"loopback, private or link-local|cannot be resolved"):
            check_webhook_url(private, allow_private=False)
        assert check_webhook_url(private, allow_private=True) == private
    assert check_webhook_url("https://93.184.215.14/hook", allow_private=False) == "https://93.184.215.14/hook"
    with pytest.raises(InvalidInput, match="cannot be resolved"):
        check_webhook_url("https://no-such-host.invalid/hook", allow_private=False)


def test_signature_and_backoff_schedule() -> None:
    body = b'{"upload_id":"u1","status_code":200}'
    now = time.time()
    ts = str(int(now))
    signature = "sha256=" + sign("s3cret", ts, body)
    assert verify("s3cret", ts, body, signature, now=now)
    assert not verify("other", ts, body, signature, now=now)
    assert not verify("s3cret", ts, body + b" ", signature, now=now)
    assert not verify("s3cret", ts, body, signature, now=now + 3600)  # replayed an hour later
    # 2, 4, 8 ... capped at 10, until the schedule passes 60 s
    delays = [retry_delay(n, 2.0, 10.0, 60.0) for n in range(1, 10)]
    assert delays[:5] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert None in delays and sum(d for d in delays if d) <= 60.0


def test_decode_audio_blob() -> None:
    data = bytes(range(256)) * 4
    assert decode_audio_blob(base64.b64encode(data).decode(), 10_000) == data
    assert decode_audio_blob("data:audio/wav;base64," + base64.b64encode(data).decode(), 10_000) == data
    assert decode_audio_blob(base64.urlsafe_b64encode(data).decode(), 10_000) == data
    wrapped = base64.encodebytes(data).decode()  # with newlines every 76 characters
    assert decode_audio_blob(wrapped, 10_000) == data
    for bad in ("not base64 at all!", "", "QUJD$"):
        with pytest.raises(InvalidInput, match="audio_blob"):
            decode_audio_blob(bad, 10_000)
    with pytest.raises(TooLarge):
        decode_audio_blob(base64.b64encode(data).decode(), 100)


def test_retry_decision_by_error_class() -> None:
    """Unavailable, TimedOut and a lost replica or node: another attempt; bad input or a bug: fail now."""
    from ray.exceptions import ActorDiedError

    from deployments.jobs import INTERNAL_ERROR, Outcome, outcome_of

    assert outcome_of(Unavailable("busy")) == Outcome(error="busy", status_code=503, transient=True)
    assert outcome_of(ModelMissing("install")) == Outcome(error="install", status_code=503, transient=True)
    assert outcome_of(TimedOut("slow")) == Outcome(error="slow", status_code=504, transient=True)
    assert outcome_of(ActorDiedError()) == Outcome(error=INTERNAL_ERROR, status_code=500, transient=True)
    assert outcome_of(NotAudio("no audio")) == Outcome(error="no audio", status_code=415)
    assert outcome_of(ValueError("a bug")) == Outcome(error=INTERNAL_ERROR, status_code=500)
    language = outcome_of(UnsupportedLanguage("zul", "(Zulu) has no speech model on this server."))
    assert language == Outcome(error="language_code 'zul' (Zulu) has no speech model on this server.", status_code=400)


def test_stale_worker_cannot_overwrite_a_reclaimed_job(tmp_path_factory, speech_wav) -> None:
    settings = fresh_settings(tmp_path_factory)
    db = Database(settings.db_url)
    upload_id = upload_row(db, speech_wav, create_token(db, "acme"))
    assert job_queue.enqueue(db, upload_id, None, None)
    assert not job_queue.enqueue(db, upload_id, None, None)  # already queued
    [first] = job_queue.claim_jobs(db, 5, lease_seconds=0.2)
    assert job_queue.claim_jobs(db, 5, lease_seconds=0.2) == []  # leased
    time.sleep(0.3)
    [second] = job_queue.claim_jobs(db, 5, lease_seconds=30)
    assert second.attempts == 2
    assert job_queue.renew_lease(db, first, 30) is None
    assert not job_queue.finish(db, first, result=JobResult(text="stale"), error=None, status_code=200)
    assert job_queue.finish(db, second, result=JobResult(text="fresh"), error=None, status_code=200)
    row = job(db, upload_id)
    assert (row.job_status, row.result["text"], row.lease_until) == ("completed", "fresh", None)


# --------------------------------------------------------------------------- routes + worker (real transcription)


@pytest.fixture(scope="module")
def client_env(tmp_path_factory, whisper_base) -> Iterator[dict[str, Any]]:
    """The FastAPI app over the real Jobs and Speech deployments (Serve's local testing mode) on their
    own database; one worker for the module, as one replica serves many requests."""
    settings = fresh_settings(tmp_path_factory, whisper_model=whisper_base)
    handles = build_local(settings, ["speech", "jobs"])
    client = client_for(settings, handles)
    db = Database(settings.db_url)
    acme, other = create_token(db, "acme"), create_token(db, "other-co")
    yield {"client": client, "handles": handles, "db": db, "acme": acme, "other": other, "settings": settings}


def _headers(token: tuple[str, Any]) -> dict[str, str]:
    return {"X-CLIENT-TOKEN": token[0]}


def _upload(env: dict[str, Any], data: bytes, token: str = "acme", name: str = "call.wav") -> str:
    response = env["client"].post(
        "/api/v1/transport/file-upload",
        headers=_headers(env[token]),
        json={"file_name": name, "audio_blob": base64.b64encode(data).decode(), "file_size": len(data)},
    )
    assert response.status_code == 200, response.text
    assert response.headers["Deprecation"] == "true"
    body = response.json()
    assert body["customer_id"] == env[token][1].customer_id and body["project_id"] == env[token][1].project_id
    return body["upload_id"]


def _get(env: dict[str, Any], upload_id: str, token: str = "acme"):
    return env["client"].post(f"/api/v1/transcribe/{upload_id}/get", headers=_headers(env[token]))


def test_upload_process_get_errors(client_env, speech_wav) -> None:
    env, client = client_env, client_env["client"]
    acme = _headers(env["acme"])
    upload_id = _upload(env, speech_wav.read_bytes())
    stored = job(env["db"], upload_id)
    assert Path(stored.path).read_bytes() == speech_wav.read_bytes()
    assert Path(stored.path).parent == env["settings"].data_dir / "uploads" / upload_id

    assert _get(env, upload_id).json() == {"message": NOT_PROCESSED}  # never submitted
    bad = client.post(
        "/api/v1/transport/file-upload",
        headers=acme,
        json={"file_name": "x.wav", "audio_blob": "%%% not base64 %%%", "file_size": 0},
    )
    assert bad.status_code == 400 and "audio_blob" in bad.json()["detail"]
    missing = client.post("/api/v1/transport/file-upload", headers=acme, json={"file_name": "x.wav", "file_size": 0})
    assert missing.status_code == 400 and "audio_blob" in missing.json()["detail"]
    small = client_for(env["settings"].updated({"max_request_mb": 0.01}), env["handles"])
    big = small.post(
        "/api/v1/transport/file-upload",
        headers=acme,
        json={"file_name": "x.wav", "audio_blob": base64.b64encode(b"\0" * 20_000).decode(), "file_size": 20_000},
    )
    assert big.status_code == 413

    # another customer's upload is not found, for process and get alike
    other = _headers(env["other"])
    assert client.post(f"/api/v1/transcribe/process/{upload_id}", headers=other, json={}).status_code == 404
    assert _get(env, upload_id, token="other").status_code == 404
    assert client.post("/api/v1/transcribe/process/no-such-id", headers=acme, json={}).status_code == 404

    for webhook in ("ftp://127.0.0.1/x", "not a url"):
        r = client.post(f"/api/v1/transcribe/process/{upload_id}", headers=acme, json={"webhook": webhook})
        assert r.status_code == 400 and "webhook" in r.json()["detail"]
    strict = client_for(env["settings"].updated({"webhooks": {"allow_private": False}}), env["handles"])
    r = strict.post(
        f"/api/v1/transcribe/process/{upload_id}", headers=acme, json={"webhook": "http://127.0.0.1:9/hook"}
    )
    assert r.status_code == 400 and "private" in r.json()["detail"]
    r = client.post(f"/api/v1/transcribe/process/{upload_id}", headers=acme, json={"language_code": "zul"})
    assert r.status_code == 400 and "KHULUMA_SPEECH_LANGUAGE_MODELS" in r.json()["detail"]
    r = client.post(f"/api/v1/transcribe/process/{upload_id}", headers=acme, json={"language_code": "klingon"})
    assert r.status_code == 400 and "language_code" in r.json()["detail"]
    assert job(env["db"], upload_id).job_status == "none"  # nothing was queued by the refused requests


def test_job_flow_with_signed_webhook(client_env, speech_wav) -> None:
    env, client = client_env, client_env["client"]
    receiver = Receiver().start()
    try:
        upload_id = _upload(env, speech_wav.read_bytes())
        r = client.post(
            f"/api/v1/transcribe/process/{upload_id}",
            headers=_headers(env["acme"]),
            json={"webhook": receiver.url, "language_code": "eng"},
        )
        assert r.status_code == 200 and "queue" in r.json()["message"]
        assert _get(env, upload_id).json() == {"message": NOT_PROCESSED}
        again = client.post(f"/api/v1/transcribe/process/{upload_id}", headers=_headers(env["acme"]), json={})
        assert again.status_code == 200 and "already" in again.json()["message"]

        headers, body = wait_until(lambda: receiver.received and receiver.received[0])[0:2]
        secret = webhook_secret_for(env["db"], env["acme"][1].id)
        assert verify(secret, headers["X-Khuluma-Timestamp"], body, headers["X-Khuluma-Signature"])
        assert not verify(
            webhook_secret_for(env["db"], env["other"][1].id),
            headers["X-Khuluma-Timestamp"],
            body,
            headers["X-Khuluma-Signature"],
        )
        payload = json.loads(body)
        assert set(payload) == {"upload_id", "postprocessed_text", "status_code", "language_id"}
        assert (payload["upload_id"], payload["status_code"], payload["language_id"]) == (upload_id, 200, "eng")
        spoken = " ".join(item["text"] for item in payload["postprocessed_text"]).lower()
        expected = {"weather", "today", "sunny", "light", "breeze", "north"}
        assert len({w.strip(".,") for w in spoken.split()} & expected) >= 4, spoken
        assert all(item["end_time"] > item["start_time"] >= 0 for item in payload["postprocessed_text"])

        done = _get(env, upload_id).json()
        assert done["message"] == "Item has been processed." and done["status"] == "completed"
        assert done["language_id"] == "eng" and done["postprocessed_text"] == payload["postprocessed_text"]
        assert len({w.strip(".,") for w in done["text"].lower().split()} & expected) >= 4, done
        with env["db"].session() as s:
            usage = s.scalars(select(UsageRecord).where(UsageRecord.reference_id == upload_id)).all()
        assert [(u.route, u.status) for u in usage] == [(job_queue.USAGE_ROUTE, "successful")]
        assert 2.0 < usage[0].seconds_transcribed < 6.0
        assert job(env["db"], upload_id).webhook_status == "delivered"
    finally:
        receiver.stop()


def test_failed_job_reports_why(client_env) -> None:
    env, client = client_env, client_env["client"]
    receiver = Receiver().start()
    try:
        upload_id = _upload(env, b"this is a text file, not audio\n" * 50, name="notes.wav")
        r = client.post(
            f"/api/v1/transcribe/process/{upload_id}", headers=_headers(env["acme"]), json={"webhook": receiver.url}
        )
        assert r.status_code == 200
        headers, body = wait_until(lambda: receiver.received and receiver.received[0])[0:2]
        payload = json.loads(body)
        assert payload["upload_id"] == upload_id and payload["status_code"] in (400, 415)
        assert payload["postprocessed_text"] == [] and payload["detail"]
        assert verify(
            webhook_secret_for(env["db"], env["acme"][1].id),
            headers["X-Khuluma-Timestamp"],
            body,
            headers["X-Khuluma-Signature"],
        )
        failed = _get(env, upload_id).json()
        assert failed["status"] == "failed" and failed["message"].startswith("Item processing failed: ")
        assert failed["error"] == payload["detail"]
        with env["db"].session() as s:
            usage = s.scalars(select(UsageRecord).where(UsageRecord.reference_id == upload_id)).all()
        assert [u.status for u in usage] == ["failed"]
    finally:
        receiver.stop()


def test_job_in_a_language_without_a_model_fails_naming_it(client_env, tmp_path: Path) -> None:
    """espeak-ng's Setswana stands in for real speech Whisper base has no model for: the job fails with the
    sync routes' message (400), never completes as a served language."""
    env, client = client_env, client_env["client"]
    require_tool("espeak-ng")
    said = (
        "Batho botlhe ba tsetswe ba gololesegile le go lekalekana ka seriti le ditshwanelo. Ba abetswe go akanya le "
        "maikutlo, mme ba tshwanetse go direlana ka mowa wa bokaulengwe."
    )
    wav = subprocess.run(["espeak-ng", "-v", "tn", "--stdout", said], check=True, capture_output=True).stdout
    receiver = Receiver().start()
    try:
        upload_id = _upload(env, wav, name="call.wav")
        r = client.post(
            f"/api/v1/transcribe/process/{upload_id}", headers=_headers(env["acme"]), json={"webhook": receiver.url}
        )
        assert r.status_code == 200
        body = wait_until(lambda: receiver.received and receiver.received[0])[1]
        payload = json.loads(body)
        assert payload["status_code"] == 400 and "without a speech model" in payload["detail"]
        assert "KHULUMA_SPEECH_LANGUAGE_MODELS" in payload["detail"]
        failed = _get(env, upload_id).json()
        assert failed["status"] == "failed" and failed["error"] == payload["detail"]
    finally:
        receiver.stop()


def test_webhook_retried_until_the_receiver_is_back(client_env, speech_wav) -> None:
    env, client = client_env, client_env["client"]
    receiver = Receiver()  # not listening yet
    upload_id = _upload(env, speech_wav.read_bytes())
    r = client.post(
        f"/api/v1/transcribe/process/{upload_id}", headers=_headers(env["acme"]), json={"webhook": receiver.url}
    )
    assert r.status_code == 200
    wait_until(lambda: job(env["db"], upload_id).webhook_attempts >= 2)  # two refused connections
    assert job(env["db"], upload_id).webhook_status == "pending"
    receiver.start()
    try:
        headers, body = wait_until(lambda: receiver.received and receiver.received[0], timeout=30)[0:2]
        assert int(headers["X-Khuluma-Delivery-Attempt"]) >= 3
        assert json.loads(body)["status_code"] == 200
        row = wait_until(lambda: (row := job(env["db"], upload_id)).webhook_status == "delivered" and row)
        assert row.webhook_attempts == int(headers["X-Khuluma-Delivery-Attempt"])
        time.sleep(1.0)
        assert len(receiver.received) == 1  # delivered once
    finally:
        receiver.stop()


def test_webhook_abandoned_after_the_retry_budget(tmp_path_factory, whisper_base, start_worker, speech_wav) -> None:
    settings = fresh_settings(tmp_path_factory, whisper_base, webhooks={"retry_seconds": 1.0, "backoff_seconds": 0.2})
    db = Database(settings.db_url)
    upload_id = upload_row(db, speech_wav, create_token(db, "acme"))
    job_queue.enqueue(db, upload_id, f"http://127.0.0.1:{free_port()}/gone", "eng")
    start_worker(settings)
    row = wait_until(lambda: (row := job(db, upload_id)).webhook_status == "gave_up" and row)
    assert row.job_status == "completed"  # the job itself succeeded
    assert row.webhook_attempts == 3  # 0.2 + 0.4 fit in 1 s; 0.8 more would not


DEAD_LEASE_S = 15.0


def test_job_in_flight_resumes_after_worker_crash(tmp_path_factory, whisper_base, start_worker, speech_wav) -> None:
    settings = fresh_settings(tmp_path_factory, whisper_base, jobs={"lease_seconds": 3.0})
    db = Database(settings.db_url)
    token = create_token(db, "acme")
    upload_id = upload_row(db, speech_wav, token)
    receiver = Receiver().start()
    try:
        job_queue.enqueue(db, upload_id, receiver.url, None)
        # a worker took it, then crashed; its lease outlasts the new replica's start even on a loaded machine
        claimed_at = time.monotonic()
        [claimed] = job_queue.claim_jobs(db, 1, lease_seconds=DEAD_LEASE_S)
        start_worker(settings)  # the restarted replica
        time.sleep(1.0)
        row = job(db, upload_id)
        assert time.monotonic() - claimed_at < DEAD_LEASE_S, "the replica took longer to start than the lease"
        assert (row.job_status, row.attempts) == ("processing", 1)  # the dead worker's lease still holds
        row = wait_until(lambda: (row := job(db, upload_id)).job_status == "completed" and row)
        assert row.attempts == 2 and row.lease_until is None
        heard = set(row.result["text"].lower().replace(".", " ").split())
        assert row.result["language_id"] == "eng" and len({"weather", "sunny", "light", "breeze", "north"} & heard) >= 3
        assert row.result is not None and not job_queue.finish(
            db, claimed, result=JobResult(), error=None, status_code=200
        )
        _, body = wait_until(lambda: receiver.received and receiver.received[0])[0:2]
        assert json.loads(body)["upload_id"] == upload_id
    finally:
        receiver.stop()


def test_poison_job_fails_after_max_attempts(tmp_path_factory, start_worker, speech_wav) -> None:
    settings = fresh_settings(tmp_path_factory, jobs={"max_attempts": 2})
    db = Database(settings.db_url)
    upload_id = upload_row(db, speech_wav, create_token(db, "acme"))
    job_queue.enqueue(db, upload_id, None, None)
    with db.session() as s:  # started twice already; the last worker died mid-job
        row = s.get(Upload, upload_id)
        assert row is not None
        row.job_status, row.attempts, row.lease_until = "processing", 2, utcnow() - timedelta(seconds=1)
    start_worker(settings, ("jobs",))  # fails it before it would need a transcription
    row = wait_until(lambda: (row := job(db, upload_id)).job_status == "failed" and row, timeout=30)
    assert "2 attempts" in row.error and row.attempts == 2


def test_unavailable_transcription_is_retried_then_failed(tmp_path_factory, start_worker, speech_wav) -> None:
    """No Speech deployment (Unavailable, transient): the job goes back to the queue until its attempts
    are spent, then fails with 503 and its webhook says why."""
    settings = fresh_settings(tmp_path_factory, jobs={"max_attempts": 2, "lease_seconds": 1.0})
    db = Database(settings.db_url)
    upload_id = upload_row(db, speech_wav, create_token(db, "acme"))
    receiver = Receiver().start()
    try:
        job_queue.enqueue(db, upload_id, receiver.url, None)
        start_worker(settings, ("jobs",))
        row = wait_until(lambda: (row := job(db, upload_id)).job_status == "failed" and row, timeout=30)
        assert row.attempts == 2 and row.error == "The transcription capability is not deployed."
        _, body = wait_until(lambda: receiver.received and receiver.received[0], timeout=30)[0:2]
        payload = json.loads(body)
        assert (payload["status_code"], payload["detail"], payload["postprocessed_text"]) == (503, row.error, [])
    finally:
        receiver.stop()


def test_cli_prints_the_webhook_secret(tmp_path: Path) -> None:
    import os
    import sys

    env = {**os.environ, "KHULUMA_DATA_DIR": str(tmp_path)}
    db = Database.migrated(Settings(data_dir=tmp_path, _env_file=None).db_url)
    _, info = create_token(db, "acme")
    out = subprocess.run(
        [sys.executable, "-m", "khuluma.cli", "token", "secret", str(info.id)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == webhook_secret_for(db, info.id)
    missing = subprocess.run(
        [sys.executable, "-m", "khuluma.cli", "token", "secret", "9999"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1 and "No token" in missing.stdout

"""Batch routes over the ingress and the Jobs deployment's batch coordinator in Serve's local testing mode (no Ray
cluster: the coordinator transcribes in a thread) and a real SeaweedFS."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from cluster.credentials import decode_token
from khuluma.app import build_local
from khuluma.cli.batch import upload_directory
from persistence.models import BatchItem
from tests.conftest import client_for
from tests.speechdata import write_audio
from tests.tools import require_tool

API = "/api/v2alpha/transcribe/batch"


@pytest.fixture()
def batch_db(tmp_path: Path, settings):
    """A database of this test's own: the session's Ray Serve app (integration tests) shares the session
    database, and its Jobs replica's batch sweep would otherwise resume these batches too."""
    from persistence.session import Database

    isolated = settings.updated({"data_dir": tmp_path / "data"})
    isolated.ensure_dirs()
    return isolated, Database.migrated(isolated.db_url)


@pytest.fixture()
def db(batch_db):
    return batch_db[1]


@pytest.fixture()
def make_token(db):
    from serve_app.tokens import create_token

    return lambda customer="acme", project="default": create_token(db, customer, project)[0]


@pytest.fixture()
def app_for(batch_db, seaweedfs: str):
    """A TestClient over a local-testing-mode batch runner with the given bucket; the runners stop afterwards."""
    runners = []

    def make(bucket: str = "khuluma-test-batch"):
        settings = batch_db[0].updated({"s3": {"endpoint_url": seaweedfs, "bucket": bucket}})
        handles = build_local(settings, ["batch", "speech"])
        runners.append(handles["batch"])
        return client_for(settings, handles)

    yield make
    for runner in runners:
        runner.stop_batches.remote().result()


@pytest.fixture()
def client(app_for):
    return app_for()


def _h(token: str) -> dict[str, str]:
    return {"X-CLIENT-TOKEN": token}


def _wait_final(client, token: str, batch_id: str, timeout: float = 300) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = next(b for b in client.get(API, headers=_h(token)).json() if b["id"] == batch_id)["status"]
        if status not in ("CREATED", "PROCESSING"):
            return status
        time.sleep(0.5)
    raise AssertionError("batch did not finish")


def test_create_validates_language_and_needs_a_token(client, make_token):
    token = make_token("batch-unit")
    assert client.post(API).status_code == 401
    bad = client.post(API, params={"lang_code": "klingon"}, headers=_h(token))
    assert bad.status_code == 400 and "lang_code" in bad.json()["detail"]
    created = client.post(API, params={"lang_code": "afr"}, headers=_h(token))
    assert created.status_code == 201
    body = created.json()
    assert set(body) == {"batch_id", "blob_endpoint", "sas_token"}
    assert decode_token(body["sas_token"])["prefix"] == f"batches/{body['batch_id']}/"
    listed = {b["id"]: b for b in client.get(API, headers=_h(token)).json()}
    assert listed[body["batch_id"]]["status"] == "CREATED" and listed[body["batch_id"]]["language_code"] == "afr"
    # nothing uploaded yet: 400 and the batch stays CREATED (the client can upload, then process)
    empty = client.post(f"{API}/{body['batch_id']}/process", headers=_h(token))
    assert empty.status_code == 400 and "No files" in empty.json()["detail"]
    assert client.get(f"{API}/{body['batch_id']}/transcriptions", headers=_h(token)).json() == []
    assert client.post(f"{API}/unknown-batch/process", headers=_h(token)).status_code == 404


def test_flow_runs_once_and_reports_every_file(client, make_token, db, tmp_path: Path):
    require_tool("espeak-ng")
    token, other = make_token("batch-unit-flow"), make_token("batch-unit-other")
    body = client.post(API, params={"lang_code": "eng"}, headers=_h(token)).json()
    batch_id = body["batch_id"]
    folder = tmp_path / "files"
    folder.mkdir()
    subprocess.run(
        ["espeak-ng", "-v", "en", "-w", str(folder / "hello.wav"), "hello, this is a short test call"], check=True
    )
    (folder / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0 definitely not audio" * 20)
    assert all(r.ok for r in upload_directory(decode_token(body["sas_token"]), folder))

    assert client.post(f"{API}/{batch_id}/process", headers=_h(other)).status_code == 404
    codes: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: codes.append(client.post(f"{API}/{batch_id}/process", headers=_h(token)).status_code)
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [202, 204, 204, 204]  # one run, whatever the concurrency

    final = _wait_final(client, token, batch_id)
    records = {
        r["blob_name"].rsplit("/", 1)[-1]: r
        for r in client.get(f"{API}/{batch_id}/transcriptions", headers=_h(token)).json()
    }
    assert final == "PARTIAL", records
    assert records["hello.wav"]["transcription_status"] == "COMPLETED"
    assert "hello" in records["hello.wav"]["transcription_text"].lower()
    assert records["photo.jpg"]["transcription_status"] == "FAILED" and records["photo.jpg"]["error_message"]
    assert client.get(f"{API}/{batch_id}/transcriptions", headers=_h(other)).status_code == 404
    with db.session() as s:
        items = list(s.scalars(select(BatchItem).where(BatchItem.batch_id == batch_id)))
    assert sorted(i.attempts for i in items) == [1, 1]


def test_without_storage_or_runner_the_answer_is_a_clear_503(local_app, batch_db, make_token):
    client = local_app(data_dir=batch_db[0].data_dir)  # no S3 endpoint configured, no batch runner deployed
    token = make_token("batch-unit-nostorage")
    r = client.post(API, headers=_h(token))
    assert r.status_code == 503 and "KHULUMA_S3_ENDPOINT_URL" in r.json()["detail"]
    r = client.post(f"{API}/whatever/process", headers=_h(token))
    assert r.status_code == 503 and r.json()["detail"] == "The batch capability is not deployed in this service."


def test_a_batch_keeps_reading_the_bucket_it_was_created_with(app_for, make_token, tmp_path: Path):
    require_tool("espeak-ng")
    token = make_token("batch-unit-bucket")
    first = app_for("khuluma-test-bucket-a")
    body = first.post(API, params={"lang_code": "eng"}, headers=_h(token)).json()
    assert "/khuluma-test-bucket-a/" in body["blob_endpoint"]
    folder = tmp_path / "files"
    folder.mkdir()
    subprocess.run(
        ["espeak-ng", "-v", "en", "-w", str(folder / "hello.wav"), "hello, this is a short test call"], check=True
    )
    assert all(r.ok for r in upload_directory(decode_token(body["sas_token"]), folder))

    # the operator changes KHULUMA_S3_BUCKET before the batch is processed: the batch still finds its files
    second = app_for("khuluma-test-bucket-b")
    assert second.post(f"{API}/{body['batch_id']}/process", headers=_h(token)).status_code == 202
    assert _wait_final(second, token, body["batch_id"]) == "COMPLETE"
    (record,) = second.get(f"{API}/{body['batch_id']}/transcriptions", headers=_h(token)).json()
    assert record["container_name"] == "khuluma-test-bucket-a" and "/khuluma-test-bucket-a/" in record["storage_url"]
    assert "hello" in record["transcription_text"].lower()


# Spellings a client may send, known and unknown, with and without a speech model on this server.
LANGUAGE_SPELLINGS = [
    "eng",
    "ENG",
    "en",
    "English",
    "afr",
    "af_ZA",
    "fra",
    "zul",
    "ZU",
    "cs-zul",
    "sot",
    "xho",
    "xx",
    "e",
]


def test_batch_and_sync_accept_and_refuse_the_same_languages(batch_db, seaweedfs: str, make_token, tmp_path: Path):
    """One registry and one model check for every route: whatever sync transcription accepts, batch create
    accepts (stored normalised), and whatever sync refuses, batch refuses with the same message, naming the field."""
    settings = batch_db[0].updated({"s3": {"endpoint_url": seaweedfs, "bucket": "khuluma-test-batch"}})
    client = client_for(settings, build_local(settings, ["speech"]))
    token = make_token("batch-unit-languages")
    silence = tmp_path / "quiet.wav"
    write_audio(np.zeros(8000, dtype=np.float32), 16000, silence)
    outcomes = {}
    for spelling in LANGUAGE_SPELLINGS:
        with silence.open("rb") as f:
            sync = client.post(
                "/api/v2alpha/transcribe/sync/file",
                params={"lang_code": spelling},
                files={"file": ("quiet.wav", f)},
                headers=_h(token),
            )
        batch = client.post(API, params={"lang_code": spelling}, headers=_h(token))
        assert (sync.status_code, batch.status_code) in ((200, 201), (400, 400)), (spelling, sync.text, batch.text)
        if sync.status_code == 400:
            assert batch.json()["detail"] == sync.json()["detail"] and "lang_code" in batch.json()["detail"]
        else:
            listed = {b["id"]: b for b in client.get(API, headers=_h(token)).json()}
            assert listed[batch.json()["batch_id"]]["language_code"] == sync.json()["language_code"], spelling
        outcomes[spelling] = sync.status_code
    # the table covers both outcomes, and spellings of one language agree
    assert outcomes["eng"] == outcomes["ENG"] == outcomes["en"] == 200
    assert outcomes["zul"] == outcomes["cs-zul"] == outcomes["xx"] == 400


def test_batch_listing_matches_its_openapi_schema(client, make_token):
    """What the routes send validates against the app's own OpenAPI (the timestamps carry no zone, and the schema
    says so instead of claiming RFC 3339 `format: date-time`)."""
    from jsonschema import Draft202012Validator, FormatChecker

    token = make_token("batch-unit-schema")
    assert client.post(API, params={"lang_code": "eng"}, headers=_h(token)).status_code == 201
    listed = client.get(API, headers=_h(token)).json()
    openapi = client.get("/openapi.json").json()
    schema = {"$ref": "#/components/schemas/BatchInfo", "components": openapi["components"]}
    validator = Draft202012Validator(schema, format_checker=FormatChecker())
    assert listed and all(not list(validator.iter_errors(item)) for item in listed), [
        e.message for item in listed for e in validator.iter_errors(item)
    ]
    stamp = openapi["components"]["schemas"]["BatchInfo"]["properties"]["created_at"]
    assert "format" not in stamp and "+" not in listed[0]["created_at"] and not listed[0]["created_at"].endswith("Z")

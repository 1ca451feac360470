"""Batch transcription end to end: real SeaweedFS, real Ray tasks, real Whisper, through the Serve application.

- create -> upload with the credential (outside the prefix refused) -> process (202, then 204) -> poll -> results;
  a file that is not audio fails alone, with a reason; another customer gets 404; usage is metered per file.
- a Ray worker SIGKILLed while transcribing: its file is retried and every file has exactly one result.
- the Serve application restarted mid-batch: the batch resumes and nothing is lost or done twice.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from cluster.credentials import decode_token
from khuluma.cli.batch import upload_directory, upload_file
from persistence.models import BatchItem, UsageRecord

pytestmark = pytest.mark.integration

API = "/api/v2alpha/transcribe/batch"
RESTART_COPIES = 4  # copies of each phrase's file in the restart test
from tests.speechdata import CALL_PHRASES as PHRASES  # noqa: E402
from tests.speechdata import closest_phrase, similarity  # noqa: E402
from tests.tools import require_tool  # noqa: E402


def _speak(text: str, path: Path) -> None:
    subprocess.run(["espeak-ng", "-v", "en", "-s", "150", "-w", str(path), text], check=True, capture_output=True)


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("espeak-ng")
    folder = tmp_path_factory.mktemp("batch-audio")
    for i, phrase in enumerate(PHRASES):
        _speak(phrase, folder / f"call-{i}.wav")
    return folder


def _headers(token: str) -> dict[str, str]:
    return {"X-CLIENT-TOKEN": token}


def _create(url: str, token: str, lang: str | None = "eng") -> dict:
    r = httpx.post(f"{url}{API}", params={"lang_code": lang} if lang else {}, headers=_headers(token), timeout=60)
    assert r.status_code == 201, r.text
    return r.json()


def _wait_status(url: str, token: str, batch_id: str, wanted: set[str], timeout: float = 600) -> dict:
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        try:
            r = httpx.get(f"{url}{API}", headers=_headers(token), timeout=30)
        except httpx.HTTPError:  # the application may be restarting
            r = None
        if r is not None and r.status_code == 200:
            last = next(b for b in r.json() if b["id"] == batch_id)
            if last["status"] in wanted:
                return last
        time.sleep(1)
    raise AssertionError(f"batch {batch_id} did not reach {wanted} within {timeout}s (last: {last})")


def _items(db, batch_id: str) -> list[BatchItem]:
    with db.session() as s:
        return list(s.scalars(select(BatchItem).where(BatchItem.batch_id == batch_id)))


def _upload(created: dict, folder: Path) -> None:
    results = upload_directory(decode_token(created["sas_token"]), folder, parallel=3)
    assert results and all(r.ok for r in results), [r.detail for r in results if not r.ok]


def test_batch_end_to_end(serve_url: str, make_token, db, audio_dir: Path, tmp_path: Path):
    token, stranger = make_token("batch-e2e"), make_token("batch-stranger")
    created = _create(serve_url, token)
    batch_id = created["batch_id"]
    assert created["blob_endpoint"].endswith(f"/batches/{batch_id}/")

    folder = tmp_path / "upload"
    folder.mkdir()
    for i in range(3):
        shutil.copy(audio_dir / f"call-{i}.wav", folder / f"call-{i}.wav")
    (folder / "notes.txt").write_text("This is a meeting agenda, not a recording.\n")
    _upload(created, folder)
    sas = decode_token(created["sas_token"])
    outside = upload_file(sas, folder / "call-0.wav", "batches/someone-else/call-0.wav")
    assert not outside.ok and "403" in outside.detail

    assert httpx.post(f"{serve_url}{API}/{batch_id}/process", headers=_headers(stranger)).status_code == 404
    first = httpx.post(f"{serve_url}{API}/{batch_id}/process", params={"diarise": 0}, headers=_headers(token))
    assert first.status_code == 202, first.text
    again = httpx.post(f"{serve_url}{API}/{batch_id}/process", headers=_headers(token))
    assert again.status_code == 204

    listed = httpx.get(f"{serve_url}{API}", headers=_headers(token)).json()
    mine = next(b for b in listed if b["id"] == batch_id)
    assert mine["status"] in ("PROCESSING", "PARTIAL") and mine["language_code"] == "eng"
    assert set(mine) >= {
        "id",
        "customer_id",
        "project_id",
        "keychain_id",
        "status",
        "language_code",
        "created_at",
        "updated_at",
    }
    assert all(b["id"] != batch_id for b in httpx.get(f"{serve_url}{API}", headers=_headers(stranger)).json())

    final = _wait_status(serve_url, token, batch_id, {"COMPLETE", "PARTIAL", "FAILED"})
    assert final["status"] == "PARTIAL"  # three recordings transcribed, the text file failed
    assert httpx.post(f"{serve_url}{API}/{batch_id}/process", headers=_headers(token)).status_code == 204

    r = httpx.get(f"{serve_url}{API}/{batch_id}/transcriptions", headers=_headers(token), timeout=30)
    assert r.status_code == 200, r.text
    records = {rec["blob_name"]: rec for rec in r.json()}
    assert sorted(records) == [f"batches/{batch_id}/call-{i}.wav" for i in range(3)] + [f"batches/{batch_id}/notes.txt"]
    for i in range(3):
        rec = records[f"batches/{batch_id}/call-{i}.wav"]
        assert rec["transcription_status"] == "COMPLETED"
        assert rec["container_name"] and rec["storage_url"].endswith(rec["blob_name"])
        assert rec["language_code"] == "eng" and 1.0 < rec["audio_length_seconds"] < 10.0
        assert rec["upload_file_size"] == (folder / f"call-{i}.wav").stat().st_size
        heard = rec["transcription_text"]
        # its own file's words: closer to its phrase than to any other (other phrases read about 0.2-0.35 alike)
        assert closest_phrase(heard, PHRASES) == i and similarity(PHRASES[i], heard) >= 0.5, (PHRASES[i], heard)
    failed = records[f"batches/{batch_id}/notes.txt"]
    assert failed["transcription_status"] == "FAILED" and failed["error_message"]

    assert httpx.get(f"{serve_url}{API}/{batch_id}/transcriptions", headers=_headers(stranger)).status_code == 404
    assert httpx.get(f"{serve_url}{API}/no-such-batch/transcriptions", headers=_headers(token)).status_code == 404

    usage = httpx.get(
        f"{serve_url}/v1/transcribe/usage",
        headers=_headers(token),
        params={
            "start_date_time": "2020-01-01T00:00:00Z",
            "end_date_time": "2099-01-01T00:00:00Z",
            "interval": "month",
        },
    )
    assert usage.status_code == 200, usage.text
    report = usage.json()
    assert (report["total_successful_invocations"], report["total_failed_invocations"]) == (3, 1)
    assert report["total_seconds_transcribed"] == pytest.approx(
        sum(records[f"batches/{batch_id}/call-{i}.wav"]["audio_length_seconds"] for i in range(3)), rel=1e-3
    )


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _transcribing_workers() -> list[int]:
    """Pids of the Ray workers of THIS test session (descendants of this process) running a batch file task."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "cmdline").read_bytes().startswith(b"ray::batch-file-"):  # the task's name
                continue
            pid = ancestor = int(entry.name)
            while ancestor > 1 and ancestor != me:
                ancestor = _parent(ancestor)
            if ancestor == me:
                found.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found


def _assert_exactly_once(db, batch_id: str, expected_files: int) -> list[BatchItem]:
    items = _items(db, batch_id)
    assert len(items) == expected_files and len({i.blob_name for i in items}) == expected_files
    assert all(i.status == "COMPLETED" and i.record and i.record["transcription_text"] for i in items)
    with db.session() as s:
        rows = s.execute(
            select(UsageRecord.reference_id, UsageRecord.status, func.count())
            .where(UsageRecord.reference_id.in_([i.id for i in items]))
            .group_by(UsageRecord.reference_id, UsageRecord.status)
        ).all()
    assert sorted((status, n) for _, status, n in rows) == [("successful", 1)] * expected_files
    return items


def test_worker_killed_mid_batch_still_yields_each_result_once(serve_url: str, make_token, db, audio_dir: Path):
    token = make_token("batch-kill")
    created = _create(serve_url, token)
    batch_id = created["batch_id"]
    _upload(created, audio_dir)
    assert httpx.post(f"{serve_url}{API}/{batch_id}/process", headers=_headers(token)).status_code == 202

    # once a file is being transcribed (its attempt is recorded), SIGKILL every worker transcribing a file
    deadline, victims = time.time() + 300, []
    while not victims and time.time() < deadline:
        started = [i for i in _items(db, batch_id) if i.status == "PENDING" and i.attempts >= 1]
        victims = _transcribing_workers() if started else []
        time.sleep(0.05)
    assert victims, "no batch task was seen running"
    for victim in victims:
        os.kill(victim, signal.SIGKILL)  # worker processes of this session's own Ray cluster

    assert _wait_status(serve_url, token, batch_id, {"COMPLETE", "PARTIAL", "FAILED"})["status"] == "COMPLETE"
    items = _assert_exactly_once(db, batch_id, len(PHRASES))
    assert max(i.attempts for i in items) >= 2, "the killed worker's file was not retried"
    records = httpx.get(f"{serve_url}{API}/{batch_id}/transcriptions", headers=_headers(token)).json()
    assert len(records) == len(PHRASES) and {r["transcription_status"] for r in records} == {"COMPLETED"}


def test_service_restart_during_batch_loses_nothing(
    serve_url: str, make_token, db, serve_settings, audio_dir: Path, tmp_path: Path
):
    from ray import serve

    from khuluma.app import build_app
    from khuluma.cli.serve import load_serve_config

    token = make_token("batch-restart")
    created = _create(serve_url, token)
    batch_id = created["batch_id"]
    # Enough files that the batch cannot finish while the application shuts down (its replicas get a graceful
    # period, during which the runner's tasks go on): on a fast machine six short files all did.
    folder = tmp_path / "many"
    folder.mkdir()
    for copy in range(RESTART_COPIES):
        for i in range(len(PHRASES)):
            shutil.copy(audio_dir / f"call-{i}.wav", folder / f"call-{i}-{copy}.wav")
    files = len(PHRASES) * RESTART_COPIES
    _upload(created, folder)
    assert httpx.post(f"{serve_url}{API}/{batch_id}/process", headers=_headers(token)).status_code == 202

    deadline = time.time() + 300
    while time.time() < deadline:
        done_before = {i.blob_name: i.record["id"] for i in _items(db, batch_id) if i.status == "COMPLETED"}
        if done_before:
            break
        time.sleep(0.2)
    assert done_before and len(done_before) < files, "restart must happen mid-batch"

    serve.delete("khuluma")  # the whole application goes away: ingress, runner and the tasks it owns
    left = [i.status for i in _items(db, batch_id)]
    assert "PENDING" in left, f"the batch finished during the shutdown: {sorted(left)}"
    cfg = load_serve_config(Path(__file__).resolve().parents[2] / "configs" / "serve.yaml")
    serve.run(
        build_app({"settings": serve_settings.for_replica(), "deployments": cfg["deployments"]}),
        name="khuluma",
        route_prefix="/",
        blocking=False,
    )

    assert _wait_status(serve_url, token, batch_id, {"COMPLETE", "PARTIAL", "FAILED"})["status"] == "COMPLETE"
    items = _assert_exactly_once(db, batch_id, files)
    after = {i.blob_name: i.record["id"] for i in items}
    assert all(after[name] == record_id for name, record_id in done_before.items())  # nothing redone


def test_a_batch_in_a_language_routed_to_a_ctc_model(serve_url: str, make_token, audio_dir: Path, tmp_path: Path):
    """Batch tasks load the CTC model the session application routes isiXhosa to (tests/conftest.py)."""
    token = make_token("batch-ctc")
    created = _create(serve_url, token, "xho")
    folder = tmp_path / "upload"
    folder.mkdir()
    shutil.copy(audio_dir / "call-0.wav", folder / "call-0.wav")
    _upload(created, folder)
    assert httpx.post(f"{serve_url}{API}/{created['batch_id']}/process", headers=_headers(token)).status_code == 202
    assert (
        _wait_status(serve_url, token, created["batch_id"], {"COMPLETE", "PARTIAL", "FAILED"})["status"] == "COMPLETE"
    )
    [record] = httpx.get(f"{serve_url}{API}/{created['batch_id']}/transcriptions", headers=_headers(token)).json()
    assert record["language_code"] == "xho" and record["transcription_text"].startswith("ngiyabonga"), record

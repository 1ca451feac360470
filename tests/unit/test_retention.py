"""Retention of v1 uploads (cluster/retention.py): the sweep, `khuluma db prune`, and the jobs worker's sweep,
on a real SQLite database and real files."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from cluster.retention import sweep
from contracts.settings import Settings
from persistence.models import Upload, new_uuid, utcnow
from persistence.session import Database

OLD = timedelta(days=40)


@pytest.fixture()
def store(tmp_path: Path) -> tuple[Settings, Database]:
    settings = Settings(data_dir=tmp_path / "data", _env_file=None)
    settings.ensure_dirs()
    return settings, Database.migrated(settings.db_url)


def _upload(store, age: timedelta, job_status: str = "completed", webhook_status: str | None = None) -> str:  # type: ignore[no-untyped-def]
    settings, db = store
    upload_id = new_uuid()
    folder = settings.data_dir / "uploads" / upload_id
    folder.mkdir(parents=True)
    audio = folder / "call.wav"
    audio.write_bytes(b"RIFF" + os.urandom(2000))
    with db.session() as s:
        s.add(
            Upload(
                id=upload_id,
                customer_id=1,
                project_id=1,
                file_name="call.wav",
                path=str(audio),
                size_bytes=2004,
                created_at=utcnow() - age,
                job_status=job_status,
                webhook_status=webhook_status,
            )
        )
    return upload_id


def _exists(store, upload_id: str) -> tuple[bool, bool]:  # type: ignore[no-untyped-def]
    settings, db = store
    with db.session() as s:
        row = s.scalar(select(Upload).where(Upload.id == upload_id))
    return row is not None, (settings.data_dir / "uploads" / upload_id).exists()


def _stray(store, name: str, age: timedelta) -> Path:  # type: ignore[no-untyped-def]
    path = store[0].data_dir / "uploads" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * 100)
    stamp = time.time() - age.total_seconds()
    os.utime(path, (stamp, stamp))
    return path


def test_the_sweep_removes_only_what_expired_and_owes_nothing(store) -> None:
    expired = [_upload(store, OLD), _upload(store, OLD, job_status="failed"), _upload(store, OLD, job_status="none")]
    recent = _upload(store, timedelta(days=2))
    queued = _upload(store, OLD, job_status="pending")
    running = _upload(store, OLD, job_status="processing")
    delivering = _upload(store, OLD, webhook_status="pending")
    old_stray = _stray(store, "up-crashed", OLD)
    old_document = _stray(store, "documents/up-doc", OLD)
    young_stray = _stray(store, "up-in-flight", timedelta(minutes=1))
    old_folder_without_row = _stray(store, "no-such-upload/call.wav", OLD).parent
    os.utime(old_folder_without_row, (time.time() - OLD.total_seconds(),) * 2)

    report = sweep(store[0], store[1])

    assert sorted(report.uploads) == sorted(expired)
    assert all(_exists(store, u) == (False, False) for u in expired)
    assert all(_exists(store, u) == (True, True) for u in (recent, queued, running, delivering))
    assert not old_stray.exists() and not old_document.exists() and not old_folder_without_row.exists()
    assert young_stray.exists()
    assert report.bytes_freed >= 3 * 2004 + 300
    assert sweep(store[0], store[1]).uploads == []  # idempotent


def test_dry_run_changes_nothing_and_zero_days_keeps_everything(store) -> None:
    upload_id = _upload(store, OLD)
    stray = _stray(store, "up-crashed", OLD)
    report = sweep(store[0], store[1], dry_run=True)
    assert report.uploads == [upload_id] and report.orphans == ["up-crashed"]
    assert _exists(store, upload_id) == (True, True) and stray.exists()
    forever = store[0].updated({"jobs": {"retention_days": 0}})
    assert sweep(forever, store[1]).uploads == [] and _exists(store, upload_id) == (True, True)


def test_khuluma_db_prune(store, monkeypatch: pytest.MonkeyPatch) -> None:
    from khuluma.cli import app

    upload_id, recent = _upload(store, OLD), _upload(store, timedelta(days=2))
    monkeypatch.setenv("KHULUMA_DATA_DIR", str(store[0].data_dir))
    runner = CliRunner()
    dry = runner.invoke(app, ["db", "prune", "--dry-run"])
    assert dry.exit_code == 0 and f"would remove upload {upload_id}" in dry.output
    assert _exists(store, upload_id) == (True, True)
    done = runner.invoke(app, ["db", "prune", "--older-than", "1"])
    assert done.exit_code == 0, done.output
    assert f"removed upload {upload_id}" in done.output and f"removed upload {recent}" in done.output
    assert _exists(store, upload_id) == (False, False) and _exists(store, recent) == (False, False)
    bad = runner.invoke(app, ["db", "prune", "--older-than", "-1"])
    assert bad.exit_code != 0


def test_the_jobs_worker_sweeps_on_its_own(store) -> None:
    from khuluma.app import build_local

    upload_id = _upload(store, OLD)
    handles = build_local(store[0], ["jobs"])
    deadline = time.monotonic() + 30
    while _exists(store, upload_id) != (False, False) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _exists(store, upload_id) == (False, False)
    assert handles["jobs"] is not None

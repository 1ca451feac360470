"""A batch is coordinated by one runner at a time: the lease in ``batches`` (``persistence.batches.hold``) and the
coordinator that takes, renews, loses and gives it up (``cluster.batch.BatchCoordinator``), on a real SQLite
database. The transcription of a file is replaced by a step that waits for the test, so the runs overlap where the
test wants them to."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from cluster import batch as batch_module
from cluster.batch import BatchCoordinator
from contracts.settings import Settings
from persistence import batches
from persistence.models import Batch
from persistence.session import Database


@pytest.fixture()
def lease_db(tmp_path: Path) -> tuple[Settings, Database]:
    settings = Settings(data_dir=tmp_path / "data", _env_file=None)
    settings.ensure_dirs()
    return settings, Database.migrated(settings.db_url)


def _processing_batch(db: Database, files: int) -> str:
    batches.create_batch(
        db, batch_id=f"b{files}", customer_id=1, project_id=None, keychain_id=None, language_code=None, bucket="x"
    )
    with db.session() as s:
        row = s.get(Batch, f"b{files}")
        assert row is not None
        s.expunge(row)
    assert batches.start(db, row, [f"f{i}.wav" for i in range(files)], diarise=False)
    return row.id


def _row(db: Database, batch_id: str) -> Batch:
    with db.session() as s:
        row = s.get(Batch, batch_id)
        assert row is not None
        s.expunge(row)
        return row


def _lapse(db: Database, batch_id: str) -> None:
    with db.session() as s:
        s.execute(update(Batch).where(Batch.id == batch_id).values(runner_until=batches.utcnow().replace(year=2000)))


def test_one_runner_holds_a_batch_until_it_lets_go_or_its_lease_lapses(lease_db):
    _, db = lease_db
    batch_id = _processing_batch(db, 1)
    updated = _row(db, batch_id).updated_at

    assert batches.hold(db, batch_id, "a", 60)
    assert not batches.hold(db, batch_id, "b", 60)
    assert batches.hold(db, batch_id, "a", 60)  # a renewal
    assert _row(db, batch_id).updated_at == updated  # a lease is not a change the client sees

    batches.let_go(db, batch_id, "b")  # not b's to give up
    assert not batches.hold(db, batch_id, "b", 60)
    batches.let_go(db, batch_id, "a")
    assert batches.hold(db, batch_id, "b", 60)

    _lapse(db, batch_id)  # b's replica died
    assert batches.hold(db, batch_id, "a", 60)
    assert not batches.hold(db, batch_id, "b", 60)  # b's renewal fails: a holds it now


def test_only_a_processing_batch_can_be_held(lease_db):
    _, db = lease_db
    batches.create_batch(
        db, batch_id="new", customer_id=1, project_id=None, keychain_id=None, language_code=None, bucket="x"
    )
    assert not batches.hold(db, "new", "a", 60)  # CREATED
    assert not batches.hold(db, "missing", "a", 60)


def test_a_runner_that_loses_its_lease_stops_and_the_new_holder_finishes_the_batch(lease_db, monkeypatch):
    settings, db = lease_db
    batch_id = _processing_batch(db, 3)
    gate = threading.Event()
    done_by: dict[str, int] = {}
    lock = threading.Lock()

    def transcribe(bound: dict[str, Any], item_id: str) -> str:  # one file: waits for the test, then fails it
        gate.wait(30)
        with lock:
            done_by[threading.current_thread().name] = done_by.get(threading.current_thread().name, 0) + 1
        return batches.fail(db, item_id, "stand-in") or "MISSING"

    monkeypatch.setattr(batch_module, "process_item", transcribe)
    first = BatchCoordinator(settings, db, use_ray=False)
    second = BatchCoordinator(settings, db, use_ray=False)

    assert first.start(batch_id)
    assert not second.start(batch_id) and second.resume_all() == []  # held by the first
    assert first.renew() == []

    _lapse(db, batch_id)  # the first runner stalled past its lease
    assert second.resume_all() == [batch_id]
    assert first.renew() == [batch_id]  # it learns it lost the batch
    assert first.renew() == [] and _row(db, batch_id).runner == second.runner  # and never renews it again

    for runner in (first, second):
        runner._running[batch_id].name = f"runner-{id(runner)}"
    gate.set()
    first.wait(batch_id, 30)
    second.wait(batch_id, 30)

    assert done_by.get(f"runner-{id(first)}", 0) <= 1  # the file it was on, no more
    assert done_by[f"runner-{id(second)}"] >= 2
    row = _row(db, batch_id)
    assert row.status == "FAILED" and row.runner is None  # closed by the second, its lease given up


def test_a_stopping_runner_gives_its_batches_up_at_once_and_takes_none_again(lease_db, monkeypatch):
    settings, db = lease_db
    batch_id, other = _processing_batch(db, 2), _processing_batch(db, 1)
    gate, entered = threading.Event(), threading.Event()
    ran: list[str] = []

    def transcribe(bound: dict[str, Any], item_id: str) -> str:
        entered.set()
        gate.wait(30)
        ran.append(item_id)
        return batches.fail(db, item_id, "stand-in") or "MISSING"

    monkeypatch.setattr(batch_module, "process_item", transcribe)
    stopping = BatchCoordinator(settings, db, use_ray=False)
    assert stopping.start(batch_id)
    assert entered.wait(30)  # on its first file

    stopping.let_go()
    assert _row(db, batch_id).runner is None
    assert stopping.renew() == [] and _row(db, batch_id).runner is None  # its sweep takes nothing back
    assert not stopping.start(other) and stopping.resume_all() == [] and _row(db, other).runner is None
    assert batches.hold(db, batch_id, "next-replica", 60)  # no wait for the lease to lapse
    gate.set()
    stopping.wait(batch_id, 30)
    assert len(ran) == 1  # the file it was on, no more
    row = _row(db, batch_id)
    assert row.status == "PROCESSING" and row.runner == "next-replica"  # left to the next runner, not closed


@pytest.mark.parametrize(
    ("capabilities", "installed"), [(["jobs"], False), (["batch"], True), (["jobs", "batch"], True)]
)
def test_the_jobs_deployment_lists_batch_transcription_only_where_batches_are_served(
    lease_db, capabilities: list[str], installed: bool
):
    from khuluma.app import build_local
    from tests.conftest import client_for

    settings, _ = lease_db
    handles = build_local(settings, capabilities)
    try:
        client = client_for(settings, handles)
        listed = {c["capability"]: c for c in client.get("/api/v1/models").json()["capabilities"]}
        assert listed["batch_transcription"]["installed"] is installed
        probed = {d["name"]: d["healthy"] for d in client.get("/api/v1/health").json()["deployments"]}
        assert all(probed[name] for name in capabilities)
        assert {h.deployment_name for h in handles.values()} == {"Jobs"}  # one deployment answers both
    finally:
        next(iter(handles.values())).stop_batches.remote().result()

"""The retention sweep of v1 uploads: expired uploads lose their row, then their audio (in object storage, or
in ``<data_dir>/uploads`` without it: ``cluster/transfer.py``); stray upload files of
crashed requests (no row, older than the cutoff) are removed too. Run by the Jobs deployment every
``jobs.sweep_interval_seconds`` and by ``khuluma db prune``. Idempotent, and safe with several sweepers at once:
each row is deleted by a conditional DELETE (``persistence/upload_expiry.py``) and file removal tolerates a file that
is already gone.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from cluster.transfer import delete_upload
from contracts.settings import Settings
from persistence import upload_expiry
from persistence.models import utcnow
from persistence.session import Database

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    uploads: list[str] = field(default_factory=list)  # ids of expired uploads removed (or, dry run, to remove)
    bytes_freed: int = 0
    orphans: list[str] = field(default_factory=list)  # stray files/folders under <data_dir>/uploads

    def summary(self) -> str:
        return (
            f"{len(self.uploads)} expired upload(s), {len(self.orphans)} stray file(s), {self.bytes_freed / 1e6:.1f} MB"
        )


def uploads_root(settings: Settings) -> Path:
    return settings.data_dir / "uploads"


def sweep(settings: Settings, db: Database, older_than_days: float | None = None, dry_run: bool = False) -> SweepReport:
    """Remove what is older than ``older_than_days`` (default ``jobs.retention_days``; 0 there: nothing)."""
    days = settings.jobs.retention_days if older_than_days is None else older_than_days
    report = SweepReport()
    if days <= 0 and older_than_days is None:
        return report
    cutoff = utcnow() - timedelta(days=days)
    while True:
        batch = upload_expiry.expired_uploads(db, cutoff)
        for upload in batch:
            if dry_run:
                report.uploads.append(upload.id)
                report.bytes_freed += upload.size_bytes
                continue
            if upload_expiry.delete_expired(db, upload.id, cutoff):  # the row first: never a row without its audio
                report.uploads.append(upload.id)
                report.bytes_freed += delete_upload(settings, upload.id, upload.path)
        if dry_run or len(batch) < 1000:
            break
    _sweep_orphans(settings, db, cutoff.timestamp(), dry_run, report)
    if report.uploads or report.orphans:
        log.info("retention sweep (%s days%s): %s", f"{days:g}", ", dry run" if dry_run else "", report.summary())
    return report


def _sweep_orphans(settings: Settings, db: Database, cutoff_ts: float, dry_run: bool, report: SweepReport) -> None:
    root = uploads_root(settings)
    if not root.is_dir():
        return
    entries = [p for p in root.iterdir() if _mtime(p) < cutoff_ts]
    folders = [p.name for p in entries if p.is_dir() and p.name != "documents"]
    live = upload_expiry.live_upload_ids(db, folders) if folders else set()
    strays = [p for p in entries if (p.is_dir() and p.name not in live and p.name != "documents") or p.is_file()]
    documents = root / "documents"  # spooled knowledge-base uploads of requests that never finished
    if documents.is_dir():
        strays += [p for p in documents.iterdir() if p.is_file() and _mtime(p) < cutoff_ts]
    for path in strays:
        report.orphans.append(str(path.relative_to(root)))
        if dry_run:
            continue
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        report.bytes_freed += size


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()  # gone meanwhile: never older than the cutoff

"""BatchRunner deployment: the coordinator of batch transcriptions (one replica). Contract: ``contracts/batch.py``.

The ingress marks a batch PROCESSING in the database, then calls ``run(batch_id)``; the runner fans the batch's
files out as Ray tasks (``cluster.batch``). The runner holds no state of its own: at start and every
``SWEEP_SECONDS`` it resumes any batch still PROCESSING that it is not running (a restart, a lost call), so a
restart of the service during a batch loses nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from cluster.batch import BatchCoordinator, sweep_forever
from contracts.capabilities import CapabilityInfo
from deployments.common import configure_replica_logging, load_settings
from persistence.session import Database

SWEEP_SECONDS = 30.0


class BatchRunner:
    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = load_settings(settings)
        configure_replica_logging("BatchRunner", self.settings)
        self.db = Database(self.settings.db_url)
        self.db.require_current_schema()  # migrations run once before the app starts, never in a replica
        self.coordinator = BatchCoordinator(self.settings, self.db)
        self._stop = threading.Event()
        self._sweeper = threading.Thread(
            target=sweep_forever, args=(self.coordinator, SWEEP_SECONDS, self._stop), name="batch-sweep", daemon=True
        )
        self._sweeper.start()  # the first sweep runs now: batches interrupted by a restart resume at once

    def ping(self) -> bool:
        return True

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.user_config = dict(config or {})

    def describe(self) -> list[CapabilityInfo]:
        mode = "Ray tasks (SPREAD)" if self.coordinator.use_ray else "in-process, one file at a time"
        return [
            CapabilityInfo(
                capability="batch_transcription",
                installed=True,
                backend=mode,
                note="Files uploaded to S3-compatible storage are transcribed by the transcription pipeline, one task "
                "per file; see docs/batch.md.",
            )
        ]

    def run(self, batch_id: str) -> bool:
        """Start transcribing a PROCESSING batch in the background; False if it is already running."""
        return self.coordinator.start(batch_id)

    def running(self) -> list[str]:
        """Ids of the batches this runner is transcribing now."""
        return self.coordinator.running()

    def close(self) -> None:
        """Stop the sweep (running batches finish their current files; the next runner resumes the rest)."""
        self._stop.set()

    def __del__(self) -> None:
        self._stop.set()

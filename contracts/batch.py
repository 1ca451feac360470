"""Contract of batch transcription's coordinator (the Jobs deployment's batch methods): the typed handle callers
use.

The ingress owns a batch's state transitions up to PROCESSING (``persistence/batches.py``) and then hands the
batch to the Jobs deployment by id; everything else the runner needs is in the database, so no models travel here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, WithJsonSchema

from contracts.handles import DeploymentClient


class BatchClient(DeploymentClient):
    """Typed handle of the batch methods of ``deployments.jobs:Jobs``."""

    deployment = "Jobs"

    async def run(self, batch_id: str) -> bool:
        """deployments.jobs.Jobs.run_batch: start transcribing a PROCESSING batch in the background; False when
        a replica runs it already."""
        return await self._call(self._handle.run_batch.remote(batch_id))

    async def running(self) -> list[str]:
        """deployments.jobs.Jobs.running_batches: ids of the batches the replica called is transcribing now."""
        return await self._call(self._handle.running_batches.remote())

    async def close(self) -> None:
        """deployments.jobs.Jobs.stop_batches: stop resuming batches and give up the replica's own (the next
        replica's sweep resumes them)."""
        await self._call(self._handle.stop_batches.remote())


# --- wire models of the routes (what only the HTTP edge reads and writes) ---


# The spec's batch timestamps are ISO 8601 WITHOUT a zone (UTC by convention), which OpenAPI's `format: date-time`
# (RFC 3339: a zone is required) does not allow; the schema says what is really sent.
NaiveUtcTimestamp = Annotated[
    datetime,
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?$",
            "description": "ISO 8601 timestamp in UTC, without a zone (as the spec has it).",
            "examples": ["2026-11-23T08:15:30.123456"],
        }
    ),
]


class BatchCreated(BaseModel):
    batch_id: str
    blob_endpoint: str = Field(description="<endpoint>/<bucket>/batches/<batch_id>/: where the files go.")
    sas_token: str = Field(description="The batch's upload credential: base64 JSON (see docs/batch.md).")


class BatchInfo(BaseModel):
    id: str
    customer_id: int
    project_id: int | None = None
    keychain_id: int | None = None
    status: str = Field(description="CREATED | PROCESSING | COMPLETE | PARTIAL | FAILED")
    language_code: str | None = None
    created_at: NaiveUtcTimestamp
    updated_at: NaiveUtcTimestamp

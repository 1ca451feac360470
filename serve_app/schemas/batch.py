"""Wire shapes of the batch routes (the spec's field names). A file's result is the transcription record of
``contracts.speech``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, WithJsonSchema

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

"""Wire shapes of the batch routes (the spec's field names). A file's result is the transcription record of
``contracts.speech``."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


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
    created_at: datetime
    updated_at: datetime

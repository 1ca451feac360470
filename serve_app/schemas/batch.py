from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class BatchCreated(BaseModel):
    batch_id: str
    blob_endpoint: str
    sas_token: str


class BatchInfo(BaseModel):
    id: str
    customer_id: int
    project_id: int | None = None
    keychain_id: int | None = None
    status: str
    language_code: str | None = None
    created_at: datetime
    updated_at: datetime

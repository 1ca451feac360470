"""Bytes that cross from one process (maybe on another node) to another.

Nothing passes a local file path between processes: on a cluster the ingress, the model replicas and the Ray
tasks have no disk in common. A :class:`Blob` carries the bytes inline when they are small (they ride in the
handle call, under Serve's gRPC message limit), or names an object in the service's object storage
(``settings.s3``) that the receiver downloads. ``cluster/transfer.py`` makes both kinds and turns either back
into a private temporary file inside the receiving replica.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class Blob(BaseModel):
    data: bytes | None = Field(default=None, description="The bytes themselves (small payloads).")
    key: str | None = Field(default=None, description="Object key in the service's bucket (large payloads).")
    bucket: str | None = Field(default=None, description="The bucket of `key` (default: settings.s3.bucket).")
    size: int = Field(ge=0, description="Bytes, whichever way they travel.")

    @model_validator(mode="after")
    def _one_way(self) -> Blob:
        if (self.data is None) == (self.key is None):
            raise ValueError("a Blob carries either data or a key")
        return self

    @property
    def inline(self) -> bool:
        return self.data is not None

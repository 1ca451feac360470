"""Wire models of the transcription routes that are not the Transcription deployment's contract (the record, its
words and timeline are ``contracts.speech``: routes answer them as they are)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from contracts.speech import Word
from contracts.unicode import UnicodeText


class FastTranscription(BaseModel):
    """``/api/v2alpha/transcribe/fast``: the spec's three fields, then ours."""

    text: str
    lang_code: str
    diarisation: dict[str, Any] = Field(default_factory=dict)
    # additions
    words: list[Word] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    audio_length_seconds: float | None = None


class V1SyncRequest(BaseModel):
    file_name: UnicodeText
    audio_blob: UnicodeText = Field(description="base64-encoded audio bytes")
    file_size: int = Field(description="Ignored, but must be present.")


class V1SyncResult(BaseModel):
    message: str
    text: str
    language_id: str


class UploadResult(BaseModel):
    upload_id: str
    customer_id: int
    project_id: int


class ProcessRequest(BaseModel):
    webhook: UnicodeText | None = None
    language_code: UnicodeText | None = None


class MessageResult(BaseModel):
    message: str


class UploadedText(BaseModel):
    message: str
    upload_id: str | None = None
    text: str | None = None
    language_id: str | None = None
    postprocessed_text: list[dict[str, Any]] | None = None
    status: str | None = None
    error: str | None = None

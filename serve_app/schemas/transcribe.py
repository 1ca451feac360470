from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Word(BaseModel):
    word: str
    start_time: float
    end_time: float
    speaker_id: str | None = None
    probability: float | None = None


class TimelineItem(BaseModel):
    start_time: float
    end_time: float
    type: str = Field(description="speech | silence | music")
    speaker_id: str | None = None
    text: str = ""
    words: list[Word] = Field(default_factory=list)


class DiarisationResult(BaseModel):
    starts: list[float] = Field(default_factory=list)
    ends: list[float] = Field(default_factory=list)
    speaker_ids: list[str] = Field(default_factory=list)
    words: list[str] = Field(default_factory=list)
    timeline: list[TimelineItem] = Field(default_factory=list)


class TranscriptionRecord(BaseModel):
    id: str
    storage_url: str | None = None
    container_name: str = ""
    blob_name: str = ""
    customer_id: int
    project_id: int | None = None
    keychain_id: int | None = None
    upload_file_size: float | None = None
    audio_length_seconds: float = 0.0
    sample_rate: float | None = None
    channels: int | None = None
    frame_rate: float | None = None
    mime_type: str | None = None
    language_code: str = ""
    diarisation_result: DiarisationResult = Field(default_factory=DiarisationResult)
    transcription_text: str = ""
    # additions
    transcription_status: str = "COMPLETED"
    error_message: str | None = None
    warnings: list[str] = Field(default_factory=list)
    words: list[Word] = Field(default_factory=list)
    translation: str | None = None
    language_probability: float | None = Field(
        default=None, description="Confidence of the auto-detected language (null when lang_code was given).")
    model: str | None = Field(default=None, description="Speech model that transcribed the audio.")
    processing_seconds: float | None = Field(default=None, description="Time the transcription took.")


class FastTranscription(BaseModel):
    text: str
    lang_code: str
    diarisation: dict[str, Any] = Field(default_factory=dict)
    # additions
    words: list[Word] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    audio_length_seconds: float | None = None


class V1SyncRequest(BaseModel):
    file_name: str
    audio_blob: str = Field(description="base64-encoded audio bytes")
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
    webhook: str | None = None
    language_code: str | None = None


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

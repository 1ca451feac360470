"""Wire shapes of the self-hosted ("Your Cloud") profile routes: ``/v1/translate`` and ``/v1/transcribe``, no
``/api`` prefix, as the vendor's self-hosted deployments answer them (``docs/compatibility.md``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from contracts.speech import DiarisationResult, TranscriptionRecord, Word
from contracts.unicode import UnicodeText


class ProfileTranslateRequest(BaseModel):
    text: UnicodeText
    src_lang: UnicodeText = Field(description="NLLB-200 code, e.g. zul_Latn")
    tgt_lang: UnicodeText = Field(description="NLLB-200 code, e.g. eng_Latn")


class ProfileTranslation(BaseModel):
    translated_text: str


class ProfileTranscriptionData(BaseModel):
    """The transcription record's useful fields (no owner or storage fields); with ``dry_run`` only what was
    checked: the file's name and size and the normalised language (null: it would be detected)."""

    dry_run: bool = False
    file_name: str
    upload_file_size: float | None = None
    transcription_text: str = ""
    language_code: str | None = None
    language_probability: float | None = None
    audio_length_seconds: float | None = None
    sample_rate: float | None = None
    channels: int | None = None
    mime_type: str | None = None
    translation: str | None = Field(default=None, description="English translation (enable_translation).")
    words: list[Word] = Field(default_factory=list)
    diarisation_result: DiarisationResult | None = Field(
        default=None, description="Speakers and the timeline (enable_diarisation only)."
    )
    warnings: list[str] = Field(default_factory=list)
    model: str | None = None
    processing_seconds: float | None = None

    @classmethod
    def of(cls, record: TranscriptionRecord, diarised: bool) -> ProfileTranscriptionData:
        copied = record.model_dump(include=_FROM_RECORD)
        if not diarised:
            copied["diarisation_result"] = None
        return cls(file_name=record.blob_name, **copied)


# the record's fields a profile answer carries, under the same names
_FROM_RECORD = set(ProfileTranscriptionData.model_fields) & set(TranscriptionRecord.model_fields)


class ProfileTranscription(BaseModel):
    success: bool = True
    data: ProfileTranscriptionData

"""Contract of the Speech deployment: its request and result models, the transcription record and its one
builder, and the typed handle callers use.

Three shapes, from the inside out:

- :class:`TranscriptionResult`: what transcribing one file produced (audio facts, language, text, words,
  timeline, warnings). The speech pipeline (``engines.speech.pipeline``) returns it; the Speech deployment
  returns it; batch Ray tasks get it from the pipeline directly. It knows nothing of customers or storage.
- :class:`TranscriptionRecord`: the spec's transcription record (plus our additions), as the sync routes and
  the batch results answer it. Built ONLY by :func:`build_record`, from a result (COMPLETED) or from an outcome
  without one (a FAILED or PENDING batch file).
- :class:`StreamStep`: one step of streaming transcription (``/ws/stream-transcribe``).

Language errors: the deployment raises :class:`~contracts.errors.UnsupportedLanguage` without a field name;
the caller names its request field with ``.for_field("lang_code")`` (or ``"language_code"``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from contracts.handles import DeploymentClient
from contracts.payloads import Blob
from contracts.unicode import UnicodeText

COMPLETED = "COMPLETED"  # transcription_status of a record built from a result


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
    confidence: float | None = Field(
        default=None, description="Speech items: the geometric mean of the segment's token probabilities."
    )


class DiarisationResult(BaseModel):
    starts: list[float] = Field(default_factory=list)
    ends: list[float] = Field(default_factory=list)
    speaker_ids: list[str] = Field(default_factory=list)
    words: list[str] = Field(default_factory=list)
    timeline: list[TimelineItem] = Field(default_factory=list)


class Segment(BaseModel):
    """A stretch of speech as Whisper segmented it (streaming answers segments)."""

    start_time: float
    end_time: float
    text: str
    words: list[Word] = Field(default_factory=list)
    confidence: float | None = Field(
        default=None, description="The geometric mean of the segment's token probabilities (engines.speech.screening)."
    )
    language_code: str | None = Field(
        default=None,
        description="The language the segment was transcribed in, where a stream checks each segment's language "
        "(no language was given); None: the stream's language.",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What is wrong with this segment alone (under unserved_language: warn, a language without a "
        "speech model).",
    )


class Withheld(BaseModel):
    """Speech a stream committed but did not transcribe: it is in a language without a speech model here."""

    start_time: float
    end_time: float
    language_code: str | None = Field(
        default=None, description="The language it is most likely in, where one can be named (Whisper's code)."
    )
    detail: str = Field(description="Why, and the setting that adds a model for the language.")


# ---------------------------------------------------------------------------------------------- requests


class TranscribeRequest(BaseModel):
    """One file to transcribe: its bytes (inline or in object storage; ``contracts/payloads.py``), never a path."""

    audio: Blob
    file_name: str = Field(default="audio", description="The client's file name: the decoder's format hint.")
    language: str | None = Field(
        default=None, description="Requested language code (any accepted spelling); None: detect it."
    )
    diarise: bool = False
    detect_music: bool = False
    translate: bool = Field(default=False, description="Add an English translation (or a warning).")
    timeout_s: float | None = Field(default=None, description="The pipeline stops itself (TimedOut) past this.")


class StreamRequest(BaseModel):
    """One live step: the uncommitted audio so far."""

    pcm: bytes = Field(description="mono PCM, signed 16-bit little-endian, at ``sample_rate``")
    sample_rate: int = Field(
        default=16_000, ge=8_000, le=48_000, description="Hz of ``pcm``; the engine resamples it to 16 kHz."
    )
    language: str | None = None
    offset: float = Field(default=0.0, description="Seconds of the stream before this buffer.")
    commit_before: float | None = Field(
        default=None,
        description="Seconds into the buffer: segments that end before the last pause before it "
        "are final (None: nothing is committed).",
    )
    final: bool = Field(default=False, description="The stream ended: this is its last step.")
    context_seconds: float = Field(
        default=0.0,
        ge=0.0,
        description="Seconds at the start of ``pcm`` that were committed already: heard again as context by the "
        "exact decode of what this step commits, never committed twice.",
    )
    context_text: str = Field(
        default="", description="The committed text of the ``context_seconds`` (what the exact decode starts with)."
    )
    exact_tail: list[Segment] = Field(
        default_factory=list,
        description="The previous step's exact decode of this buffer's uncommitted speech (its "
        "``StreamStep.exact_until``): a last step (``final``) that finds no speech after ``exact_until`` returns it "
        "instead of decoding the same speech again.",
    )
    exact_until: float = Field(default=0.0, ge=0.0, description="Seconds of the stream that ``exact_tail`` covers.")
    judge: bool = Field(
        default=False,
        description="Check the language of each segment on its own speech (the stream's language was detected, "
        "not given): a segment in a language without a speech model is withheld (``StreamStep.withheld``), one "
        "clearly in another served language is transcribed in it, and nothing is shown of speech too short to "
        "judge.",
    )


# ---------------------------------------------------------------------------------------------- results


class TranscriptionResult(BaseModel):
    """What transcribing one file produced: no owner, no storage place (see :func:`build_record`)."""

    file_size: int = Field(description="Bytes of the file.")
    audio_length_seconds: float
    sample_rate: float | None = None  # of the original file (before resampling)
    channels: int | None = None
    frame_rate: float | None = None
    mime_type: str | None = None
    language_code: str
    language_probability: float | None = None  # auto-detection only
    language_detected_by: str | None = None  # auto-detection only: the signal that decided
    text: str
    words: list[Word] = Field(default_factory=list)
    diarised: bool = False  # words carry speaker ids: the spec's per-word arrays are filled
    timeline: list[TimelineItem] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    translation: str | None = None
    model: str | None = None
    processing_seconds: float | None = None


class StreamStep(BaseModel):
    """Segments ending before the cut are final; the rest may still change with more audio."""

    language_code: str
    language_probability: float | None = None
    language_settled: bool = Field(
        default=True, description="False: too little speech yet to decide the language; ask again with more."
    )
    candidate: list[Segment] = Field(
        default_factory=list,
        description="While the language is not settled: the speech decoded in the language it most likely is, never "
        "shown; the partial of the step that settles it is compared with it (append-only deltas agree on two).",
    )
    cut_seconds: float = Field(description="Where the caller may drop audio (0: keep it all).")
    final: list[Segment] = Field(default_factory=list)
    pending: list[Segment] = Field(default_factory=list)
    pending_text: str = ""
    exact_until: float = Field(
        default=0.0,
        description="Seconds of the stream up to which ``pending`` is the exact decode (beam search, word times) of "
        "all the uncommitted speech, because it ended in a short silence (the utterance may be over); 0: "
        "``pending`` is a quick partial.",
    )
    withheld: list[Withheld] = Field(
        default_factory=list, description="Committed speech in a language without a speech model (``judge``)."
    )
    warnings: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------- the record


class TranscriptionRecord(BaseModel):
    """The spec's transcription record (the wire shape of the sync routes and batch results)."""

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
    transcription_status: str = COMPLETED
    error_message: str | None = None
    warnings: list[str] = Field(default_factory=list)
    words: list[Word] = Field(default_factory=list)
    translation: str | None = None
    language_probability: float | None = Field(
        default=None, description="Confidence of the auto-detected language (null when lang_code was given)."
    )
    language_detected_by: str | None = Field(
        default=None,
        description="The signal that decided the auto-detected language: `whisper` (Whisper's language detection), "
        "`ctc transcript + text language id` (a CTC model's transcript read by the text language identifier), or "
        "`whisper transcript + text language id`; null when lang_code was given.",
    )
    model: str | None = Field(default=None, description="Speech model that transcribed the audio.")
    processing_seconds: float | None = Field(default=None, description="Time the transcription took.")


def build_record(
    result: TranscriptionResult | None,
    *,
    id: str,
    customer_id: int,
    project_id: int | None,
    keychain_id: int | None,
    blob_name: str,
    upload_file_size: float | None = None,
    storage_url: str | None = None,
    container_name: str = "",
    status: str = COMPLETED,
    error_message: str | None = None,
    language_code: str = "",
) -> TranscriptionRecord:
    """THE place a transcription record is made.

    With a ``result``: the COMPLETED record of it (``upload_file_size`` defaults to the file's size). Without
    one: the record of a file that has no result (yet): ``status`` (FAILED, PENDING), ``error_message`` and the
    requested ``language_code``; every audio field keeps its empty default.
    """
    owner: dict[str, Any] = {
        "id": id,
        "customer_id": customer_id,
        "project_id": project_id,
        "keychain_id": keychain_id,
        "blob_name": blob_name,
        "storage_url": storage_url,
        "container_name": container_name,
    }
    if result is None:
        return TranscriptionRecord(
            **owner,
            upload_file_size=upload_file_size,
            language_code=language_code,
            transcription_status=status,
            error_message=error_message,
        )
    words = result.words if result.diarised else []  # the spec's arrays are empty when diarisation is off
    return TranscriptionRecord(
        **owner,
        upload_file_size=result.file_size if upload_file_size is None else upload_file_size,
        audio_length_seconds=result.audio_length_seconds,
        sample_rate=result.sample_rate,
        channels=result.channels,
        frame_rate=result.frame_rate,
        mime_type=result.mime_type,
        language_code=result.language_code,
        diarisation_result=DiarisationResult(
            starts=[w.start_time for w in words],
            ends=[w.end_time for w in words],
            speaker_ids=[w.speaker_id or "" for w in words],
            words=[w.word for w in words],
            timeline=result.timeline,
        ),
        transcription_text=result.text,
        transcription_status=COMPLETED,
        error_message=None,
        warnings=result.warnings,
        words=result.words,
        translation=result.translation,
        language_probability=result.language_probability,
        language_detected_by=result.language_detected_by,
        model=result.model,
        processing_seconds=result.processing_seconds,
    )


# ---------------------------------------------------------------------------------------------- the handle


class SpeechClient(DeploymentClient):
    """Typed handle of ``deployments.speech:Speech``."""

    deployment = "Speech"

    async def transcribe(self, request: TranscribeRequest) -> TranscriptionResult:
        """deployments.speech.Speech.transcribe: raises InvalidInput/UnsupportedLanguage (400),
        UnsupportedMedia (415), Unavailable (503), TimedOut (past ``request.timeout_s``)."""
        return await self._call(self._handle.transcribe.remote(request))

    async def check_language(self, code: str) -> str:
        """deployments.speech.Speech.check_language: the normalised code, or
        UnsupportedLanguage (unknown, or no model on this server); no audio needed."""
        return await self._call(self._handle.check_language.remote(code))

    async def live_step(self, request: StreamRequest) -> StreamStep:
        """deployments.speech.Speech.live_step: one live step."""
        return await self._call(self._handle.live_step.remote(request))


# --- wire models of the routes (what only the HTTP edge reads and writes) ---


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

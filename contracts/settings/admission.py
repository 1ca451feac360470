"""Settings of admission: customer limits and capacity (``KHULUMA_ADMISSION_*``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AdmissionSettings(BaseModel):
    """Admission: what a request must pass before it runs (docs/operators.md, admission). Its customer's limits
    (`khuluma token limits`; these are the defaults for customers without their own): past one, 429 with
    `Retry-After` and `RateLimit` headers. This server's capacity for its kind of work, learned from the measured
    queueing delay: past it, 503 with `Retry-After`. Read under their old names too (`KHULUMA_LIMITS_*`, `limits:`),
    with a warning."""

    model_config = ConfigDict(extra="ignore")
    requests_per_minute: int = Field(
        default=0,
        ge=0,
        description="Requests a customer may make per minute (UTC minutes; every authenticated route, a live "
        "session's opening included), counted across all ingress replicas and nodes in the database. 0: unlimited.",
    )
    audio_seconds_per_day: int = Field(
        default=0,
        ge=0,
        description="Seconds of audio a customer may have transcribed per UTC day (usage already recorded today); a "
        "transcription, job, batch or live session that would start past it is refused. One that starts below the "
        "limit finishes, so a day may end a little above it. 0: unlimited.",
    )
    live_sessions: int = Field(
        default=0,
        ge=0,
        description="Live transcription sessions (`/ws/stream-transcribe`, `/v1/realtime`) a customer may hold open "
        "at once, across all replicas and nodes; one more is refused before the WebSocket is accepted. 0: unlimited.",
    )
    concurrent_share: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Percent of a server's capacity for one kind of work (text, translation, search, documents, "
        "speech) a customer may hold in flight at once, whatever the load; one more request answers 429 with "
        "`Retry-After`. 0: no cap of its own (when the kind is saturated every customer still gets a fair share).",
    )
    cache_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long an ingress replica uses a customer's limits and today's audio total (from the "
        "database) before reading them again: a change with `khuluma token limits` takes effect within this time, "
        "and audio recorded by other replicas counts within it.",
    )
    max_wait_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How long a model-bound request may wait behind others before its work starts, or half as long "
        "as its own work takes if that is longer. Each kind of work admits while its measured queueing delay stays "
        "within this, and answers 503 with `Retry-After` (the measured drain time) beyond it; how much that is, is "
        "learned on each server, not set.",
    )
    live_sessions_per_replica: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of live sessions one ingress replica holds at once, whoever the customers, on "
        "top of the measured one (a new session is admitted only while speech keeps every open session at real "
        "time); one more is refused before the WebSocket is accepted (503, `Retry-After`). 0: no fixed ceiling.",
    )
    text_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of text requests (NER, sentiment, classify, language detection, embeddings) "
        "one ingress replica works on at once, on top of the learned capacity; one more answers 503. 0: none.",
    )
    search_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of knowledge-base queries, and of document uploads, one ingress replica works "
        "on at once, on top of the learned capacity; one more answers 503. 0: none.",
    )
    speech_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of synchronous transcriptions one ingress replica works on at once (async jobs "
        "and batches queue in the database instead), on top of the learned capacity; one more answers 503. 0: none.",
    )
    translation_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of translation requests one ingress replica works on at once, on top of the "
        "learned capacity; one more answers 503. 0: none.",
    )
    llm_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of answers (the ask route, chat completions) one ingress replica works on at "
        "once, on top of the learned capacity; one more answers 503. 0: none.",
    )
    live_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A live session's seat in the customer's count is renewed every third of this while it is open; "
        "the seats of a replica that died free up after it.",
    )

"""Relational schema. Every record carries the integer ``customer_id``/``project_id`` of its owner."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    """Naive UTC timestamp (the spec's timestamps carry no zone)."""
    return datetime.now(UTC).replace(tzinfo=None)


def new_uuid() -> str:
    return str(uuid.uuid4())


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # The customer's own limits (`khuluma token limits`): NULL takes the operator's default (KHULUMA_ADMISSION_*),
    # 0 is unlimited.
    requests_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    audio_seconds_per_day: Mapped[int | None] = mapped_column(Integer, nullable=True)
    live_sessions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    concurrent_share: Mapped[int | None] = mapped_column(Integer, nullable=True)  # percent of a kind's capacity
    projects: Mapped[list[Project]] = relationship(back_populates="customer")


class Project(Base):
    __tablename__ = "projects"
    __table_args__ = (UniqueConstraint("customer_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    customer: Mapped[Customer] = relationship(back_populates="projects")


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # SHA-256 of the token (tokens are 256-bit random, so a fast hash is sufficient and lookups are O(1)).
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16), doc="First characters, shown in listings to tell tokens apart.")
    name: Mapped[str] = mapped_column(String(200), default="")
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    webhook_secret: Mapped[str] = mapped_column(String(64), doc="HMAC key for this token's webhook deliveries.")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class KnowledgeBase(Base):
    __tablename__ = "knowledge_bases"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    customer_id: Mapped[int] = mapped_column(Integer, index=True)
    project_id: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    documents: Mapped[list[Document]] = relationship(
        back_populates="knowledge_base", cascade="all, delete-orphan", order_by="Document.created_at"
    )


class Document(Base):
    __tablename__ = "documents"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    # the code's name for a knowledge base's id is kb_id; the column keeps the name the first schema gave it
    kb_id: Mapped[str] = mapped_column(
        "knowledgebase_id", ForeignKey("knowledge_bases.id", ondelete="CASCADE"), index=True
    )
    customer_id: Mapped[int] = mapped_column(Integer, index=True)
    filename: Mapped[str] = mapped_column(String(500))
    content_sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)
    mime_type: Mapped[str | None] = mapped_column(String(200), nullable=True)
    language: Mapped[str | None] = mapped_column(String(16), nullable=True)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    # "indexing" while vectors are written, "ready" after; a crash leaves "indexing" rows that start-up cleans.
    status: Mapped[str] = mapped_column(String(16), default="indexing")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    knowledge_base: Mapped[KnowledgeBase] = relationship(back_populates="documents")
    __table_args__ = (Index("ix_documents_kb_sha", "knowledgebase_id", "content_sha256"),)


class Upload(Base):
    """A v1 file upload and its (optional) asynchronous transcription job."""

    __tablename__ = "uploads"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    customer_id: Mapped[int] = mapped_column(Integer, index=True)
    project_id: Mapped[int] = mapped_column(Integer)
    token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    file_name: Mapped[str] = mapped_column(String(500))
    path: Mapped[str] = mapped_column(String(1000))
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # job: none -> pending -> processing -> completed | failed
    job_status: Mapped[str] = mapped_column(String(16), default="none", index=True)
    language_code: Mapped[str | None] = mapped_column(String(16), nullable=True)
    webhook: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    result: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    webhook_status: Mapped[str | None] = mapped_column(String(16), nullable=True)  # pending|delivered|gave_up
    webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    webhook_next_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)


class Batch(Base):
    __tablename__ = "batches"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    customer_id: Mapped[int] = mapped_column(Integer, index=True)
    project_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    keychain_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # CREATED -> PROCESSING -> COMPLETE | PARTIAL (some files failed) | FAILED (all failed)
    status: Mapped[str] = mapped_column(String(16), default="CREATED")
    language_code: Mapped[str | None] = mapped_column(String(16), nullable=True)
    diarise: Mapped[bool] = mapped_column(Boolean, default=False)
    # The bucket the files were uploaded to (NULL: the configured one); a batch always reads from it.
    bucket: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # The replica coordinating the PROCESSING batch and until when (a lease, renewed while it runs): one runner at a
    # time even with several Jobs replicas; NULL while none holds it.
    runner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    runner_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)
    items: Mapped[list[BatchItem]] = relationship(back_populates="batch", cascade="all, delete-orphan")


class BatchItem(Base):
    __tablename__ = "batch_items"
    __table_args__ = (UniqueConstraint("batch_id", "blob_name"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_uuid)
    batch_id: Mapped[str] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    blob_name: Mapped[str] = mapped_column(String(1000))
    status: Mapped[str] = mapped_column(String(16), default="PENDING")  # PENDING|COMPLETED|FAILED
    record: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)
    batch: Mapped[Batch] = relationship(back_populates="items")


class UsageRecord(Base):
    """One metered invocation. ``status``: successful | failed | pending."""

    __tablename__ = "usage_records"
    __table_args__ = (Index("ix_usage_customer_time", "customer_id", "created_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer_id: Mapped[int] = mapped_column(Integer)
    project_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    route: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16), default="successful")
    seconds_transcribed: Mapped[float] = mapped_column(Float, default=0.0)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    reference_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class RealtimeClientSecret(Base):
    """A Live API client secret (``POST /v1/realtime/client_secrets``): short-lived, single use, bound to the token
    that minted it (its customer and project) and to the session configuration it was minted with."""

    __tablename__ = "realtime_client_secrets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # SHA-256 of the secret (256-bit random, as API tokens): the secret itself is never stored.
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    customer_id: Mapped[int] = mapped_column(Integer)
    project_id: Mapped[int] = mapped_column(Integer)
    session: Mapped[dict] = mapped_column(JSON, doc="The session configuration the secret opens.")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    # set once, by the one connection that consumes the secret (a conditional UPDATE)
    used_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class RateWindow(Base):
    """Requests a customer was admitted in one minute, across every ingress replica
    (``persistence/admission_counts.py``: replicas claim slices of the limit with one atomic UPSERT each). Rows of
    past minutes are deleted."""

    __tablename__ = "rate_windows"
    customer_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    window_start: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False, doc="Unix time, s.")
    used: Mapped[int] = mapped_column(Integer, default=0)
    last_grant: Mapped[int] = mapped_column(Integer, default=0, doc="What the last claim got (its RETURNING).")


class LiveSessionSlot(Base):
    """One of a customer's live-session seats, held by an open ``/ws/stream-transcribe`` session until it closes
    or its lease (renewed while open) expires."""

    __tablename__ = "live_session_slots"
    customer_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    session_id: Mapped[str] = mapped_column(String(36), index=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime)


class UsageRefusal(Base):
    """Requests refused before any work (429 at a customer limit, 503 when a queue was full), counted per customer,
    UTC minute and reason. Kept apart from ``usage_records``: a refusal is not an invocation and is never billed."""

    __tablename__ = "usage_refusals"
    customer_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    minute: Mapped[datetime] = mapped_column(DateTime, primary_key=True)
    reason: Mapped[str] = mapped_column(String(32), primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)

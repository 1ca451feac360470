"""Knowledge-base services: the seven operations of the spec over the database and the KnowledgeStore.

Rules kept here:
- Tenancy: every knowledge base and document belongs to a customer; another customer's is answered 404 (never
  403), so ids of others cannot even be probed. The KnowledgeStore checks the owner again on its side.
- Uploads stream to disk (``max_document_mb`` -> 413), the text is extracted in a worker thread (415 for
  unsupported or unreadable files, 400 for no text) and the file is removed; only chunks are kept.
- Same content uploaded twice into one knowledge base: idempotent. The existing document is returned (same id
  and its first filename) with ``duplicate: true``; nothing is indexed twice.
- Never half-written: a document row is ``indexing`` until its vectors are stored, then ``ready``. If indexing
  fails, its vectors and row are removed and the error is returned. Listings and queries show ``ready``
  documents only; ``indexing`` rows older than :data:`STALE_INDEXING` (a crash mid-upload) are swept, vectors
  included, at the next upload into that knowledge base.
- Deleting a document removes its vectors first, then its row; deleting a knowledge base drops its collection
  first, then its rows (a failure leaves everything in place to retry).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from fastapi import Request
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from serve_app.context import AppContext
from persistence.models import Document, KnowledgeBase, utcnow
from contracts.errors import InvalidInput, NotFound
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal
from serve_app.uploads import receive_file

STALE_INDEXING = timedelta(hours=2)
READY = "ready"
INDEXING = "indexing"


# --- helpers -------------------------------------------------------------------------------------------------

def _parse_id(value: str, field: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise InvalidInput(f"Invalid request: field '{field}' must be a UUID.") from None


async def _db(ctx: AppContext, fn: Any, *args: Any) -> Any:
    """Run ``fn(session, *args)`` in one transaction on a worker thread."""

    def work() -> Any:
        with ctx.db.session() as session:
            return fn(session, *args)

    return await anyio.to_thread.run_sync(work)


def _owned_kb(session: Session, caller: Principal, kb_id: str) -> KnowledgeBase:
    kb = session.get(KnowledgeBase, kb_id)
    if kb is None or kb.customer_id != caller.customer_id:
        raise NotFound("Knowledge base not found.")
    return kb


def _doc_info(doc: Document) -> dict[str, Any]:
    return {"id": doc.id, "knowledgebase_id": doc.knowledgebase_id, "filename": doc.filename}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def _knowledge(ctx: AppContext):  # type: ignore[no-untyped-def]
    return ctx.backends.require("knowledge")


# --- knowledge bases -----------------------------------------------------------------------------------------

async def create_kb(ctx: AppContext, caller: Principal, name: str) -> dict[str, Any]:
    name = name.strip()
    if not name:
        raise InvalidInput("Invalid request: field 'knowledgebase_name' must not be empty.")
    _knowledge(ctx)  # 503 now rather than a knowledge base that can never hold documents

    def insert(session: Session) -> dict[str, Any]:
        kb = KnowledgeBase(customer_id=caller.customer_id, project_id=caller.project_id, name=name)
        session.add(kb)
        session.flush()
        return {"id": kb.id, "knowledgebase_name": kb.name}

    return await _db(ctx, insert)


async def list_kbs(ctx: AppContext, caller: Principal) -> list[dict[str, Any]]:
    def fetch(session: Session) -> list[dict[str, Any]]:
        kbs = session.scalars(
            select(KnowledgeBase).where(KnowledgeBase.customer_id == caller.customer_id)
            .options(selectinload(KnowledgeBase.documents)).order_by(KnowledgeBase.created_at)
        ).all()
        return [{"id": kb.id, "knowledgebase_name": kb.name,
                 "documents": [_doc_info(d) for d in kb.documents if d.status == READY]} for kb in kbs]

    return await _db(ctx, fetch)


async def delete_kb(ctx: AppContext, caller: Principal, kb_id: str) -> dict[str, Any]:
    kb_id = _parse_id(kb_id, "knowledgebase_id")
    await _db(ctx, _owned_kb, caller, kb_id)
    await _knowledge(ctx).delete_kb(kb_id)  # vectors first: a failure here leaves the knowledge base intact

    def remove(session: Session) -> None:
        kb = session.get(KnowledgeBase, kb_id)
        if kb is not None:
            session.delete(kb)  # documents go with it (ORM cascade and ON DELETE CASCADE)

    await _db(ctx, remove)
    return {"message": "Knowledge base deleted.", "id": kb_id}


# --- documents -----------------------------------------------------------------------------------------------

async def add_document(ctx: AppContext, caller: Principal, kb_id: str, request: Request) -> dict[str, Any]:
    from engines.documents import extract_text

    kb_id = _parse_id(kb_id, "knowledgebase_id")
    await _db(ctx, _owned_kb, caller, kb_id)
    knowledge = _knowledge(ctx)
    limit = int(ctx.settings.search.max_document_mb * 1024 * 1024)
    upload = await receive_file(request, "file", limit, ctx.settings.data_dir / "uploads" / "documents")
    try:
        digest = await anyio.to_thread.run_sync(_sha256, upload.path)
        existing = await _db(ctx, _find_ready_copy, kb_id, digest)
        if existing is not None:
            return {**existing, "duplicate": True}
        extracted = await anyio.to_thread.run_sync(extract_text, upload.path, upload.filename, upload.content_type)
    finally:
        upload.delete()
    await _sweep_stale(ctx, kb_id)

    def insert(session: Session) -> str:
        _owned_kb(session, caller, kb_id)  # still there
        doc = Document(knowledgebase_id=kb_id, customer_id=caller.customer_id, filename=upload.filename,
                       content_sha256=digest, size_bytes=upload.size, mime_type=extracted.mime_type,
                       status=INDEXING)
        session.add(doc)
        session.flush()
        return doc.id

    doc_id: str = await _db(ctx, insert)
    try:
        indexed = await knowledge.add_document(kb_id, doc_id, upload.filename, extracted.text, caller.customer_id)
    except BaseException:  # failed or cancelled (client gone): nothing of it may stay
        await asyncio.shield(_remove_document(ctx, kb_id, doc_id))
        raise

    def finish(session: Session) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        doc = session.get(Document, doc_id)
        if doc is None:  # deleted (or its knowledge base was) while it was being indexed
            return None, None
        twin = _find_ready_copy(session, kb_id, digest)
        if twin is not None:  # the same file finished first in a concurrent upload
            session.delete(doc)
            return None, twin
        doc.status, doc.chunk_count, doc.language = READY, int(indexed["chunks"]), indexed.get("language")
        return _doc_info(doc), None

    info, twin = await _db(ctx, finish)
    if info is None:
        await knowledge.delete_document(kb_id, doc_id)
        if twin is not None:
            return {**twin, "duplicate": True}
        raise NotFound("Knowledge base not found: it was deleted while the document was being indexed.")
    await record_usage(ctx, caller, "knowledgebase_document", tokens=count_tokens(extracted.text),
                       reference_id=doc_id)
    return {**info, "duplicate": False}


def _find_ready_copy(session: Session, kb_id: str, digest: str) -> dict[str, Any] | None:
    doc = session.scalars(
        select(Document).where(Document.knowledgebase_id == kb_id, Document.content_sha256 == digest,
                               Document.status == READY).order_by(Document.created_at).limit(1)
    ).first()
    return _doc_info(doc) if doc is not None else None


async def _remove_document(ctx: AppContext, kb_id: str, doc_id: str) -> None:
    """Vectors, then the row (best effort on the vectors: the KnowledgeStore already undid its own write)."""
    try:
        await _knowledge(ctx).delete_document(kb_id, doc_id)
    finally:
        def drop(session: Session) -> None:
            doc = session.get(Document, doc_id)
            if doc is not None:
                session.delete(doc)

        await _db(ctx, drop)


async def _sweep_stale(ctx: AppContext, kb_id: str) -> None:
    def stale(session: Session) -> list[str]:
        cutoff = utcnow() - STALE_INDEXING
        return list(session.scalars(select(Document.id).where(
            Document.knowledgebase_id == kb_id, Document.status == INDEXING, Document.created_at < cutoff)))

    for doc_id in await _db(ctx, stale):
        await _remove_document(ctx, kb_id, doc_id)


async def list_documents(ctx: AppContext, caller: Principal, kb_id: str) -> list[dict[str, Any]]:
    kb_id = _parse_id(kb_id, "knowledgebase_id")

    def fetch(session: Session) -> list[dict[str, Any]]:
        kb = _owned_kb(session, caller, kb_id)
        return [_doc_info(d) for d in kb.documents if d.status == READY]

    return await _db(ctx, fetch)


async def delete_document(ctx: AppContext, caller: Principal, document_id: str) -> dict[str, Any]:
    document_id = _parse_id(document_id, "document_id")

    def find(session: Session) -> str:
        doc = session.get(Document, document_id)
        if doc is None or doc.customer_id != caller.customer_id:
            raise NotFound("Document not found.")
        return doc.knowledgebase_id

    kb_id = await _db(ctx, find)
    await _remove_document(ctx, kb_id, document_id)
    return {"message": "Document deleted.", "id": document_id}


# --- query ---------------------------------------------------------------------------------------------------

async def query(ctx: AppContext, caller: Principal, kb_id: str, text: str, language: str | None,
                top_k: int = 5, strict_language: bool = False) -> dict[str, Any]:
    from engines.retrieval import normalise_language

    kb_id = _parse_id(kb_id, "knowledgebase_id")
    if not text or not text.strip():
        raise InvalidInput("Invalid request: field 'query' must not be empty.")
    try:
        normalise_language(language)
    except ValueError as exc:
        raise InvalidInput(f"Invalid request: field 'language': {exc}.") from None

    def hidden_documents(session: Session) -> set[str]:
        _owned_kb(session, caller, kb_id)
        return set(session.scalars(select(Document.id).where(Document.knowledgebase_id == kb_id,
                                                             Document.status != READY)))

    hidden = await _db(ctx, hidden_documents)
    wanted = top_k + (20 if hidden else 0)
    hits = await _knowledge(ctx).query(kb_id, text, language, wanted, customer_id=caller.customer_id,
                                       strict_language=strict_language)
    results = [h for h in hits if h.get("document_id") not in hidden][:top_k]
    await record_usage(ctx, caller, "knowledgebase_query", tokens=count_tokens(text))
    return {"search_result": results}

"""Knowledge-base services: the seven operations of the spec over the database and the Search.

Rules kept here:
- Tenancy: every knowledge base and document belongs to a customer; another customer's is answered 404 (never
  403), so ids of others cannot even be probed. The Search deployment checks the owner again on its side.
- Uploads stream to disk (``search.max_document_mb`` -> 413); the Search deployment reads the saved file (415 for
  unsupported or unreadable files, 400 for no text), and the file is removed once it answers: only chunks are
  kept.
- Same content uploaded twice into one knowledge base: idempotent. The existing document is returned (same id
  and its first filename) with ``duplicate: true``; nothing is indexed twice.
- Never half-written: a document row is ``indexing`` until its vectors are stored, then ``ready``. If reading or
  indexing fails, its vectors and row are removed and the error is returned. Listings and queries show ``ready``
  documents only; ``indexing`` rows older than :data:`STALE_INDEXING` (a crash mid-upload) are swept, vectors
  included, at the next upload into that knowledge base.
- Deleting a document removes its vectors first, then its row; deleting a knowledge base drops its collection
  first, then its rows (a failure leaves everything in place to retry).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
from fastapi import Request
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from cluster.transfer import blob_from_file, discard
from contracts import languages
from contracts.errors import InvalidInput, NotFound, UnsupportedLanguage
from contracts.search import (
    AddDocument,
    Deleted,
    DocumentCreated,
    DocumentFile,
    DocumentInfo,
    EmptyDocument,
    IndexedDocument,
    KnowledgeBaseCreated,
    KnowledgeBaseInfo,
    Passage,
    QueryResult,
    SearchClient,
    SearchQuery,
    SearchResultItem,
)
from persistence.models import Document, KnowledgeBase, utcnow
from serve_app.context import AppContext, required
from serve_app.services.text_limits import TextLimits, check_size
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal
from serve_app.uploads import receive_file

log = logging.getLogger(__name__)
T = TypeVar("T")

STALE_INDEXING = timedelta(hours=2)
READY = "ready"
INDEXING = "indexing"


# --- helpers -------------------------------------------------------------------------------------------------


# A knowledge base's id is ``kb_id`` in the code; the routes' path parameter (and so a 400's field), the document's
# wire field and the database column keep the spec's ``knowledgebase_id``.
KB_PARAMETER = "knowledgebase_id"


def parse_id(value: str, field: str = KB_PARAMETER) -> str:
    """``value`` as a canonical UUID, or a 400 naming ``field``."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise InvalidInput(f"Invalid request: field '{field}' must be a UUID.") from None


async def _db(ctx: AppContext, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(session, *args)`` in one transaction on a worker thread."""

    def work() -> T:
        with ctx.db.session() as session:
            return fn(session, *args)

    return await anyio.to_thread.run_sync(work)


def _owned_kb(session: Session, caller: Principal, kb_id: str) -> KnowledgeBase:
    kb = session.get(KnowledgeBase, kb_id)
    if kb is None or kb.customer_id != caller.customer_id:
        raise NotFound("Knowledge base not found.")
    return kb


def _documents_not_ready(session: Session, caller: Principal, kb_id: str) -> set[str]:
    """The ids of a knowledge base's documents that are not ready, in one statement that checks its owner too (a
    query's only database read): :class:`NotFound` for an unknown or foreign knowledge base."""
    rows = session.execute(
        select(KnowledgeBase.customer_id, Document.id)
        .outerjoin(Document, (Document.kb_id == KnowledgeBase.id) & (Document.status != READY))
        .where(KnowledgeBase.id == kb_id)
    ).all()
    if not rows or rows[0][0] != caller.customer_id:
        raise NotFound("Knowledge base not found.")
    return {doc_id for _, doc_id in rows if doc_id is not None}


def _doc_info(doc: Document) -> DocumentInfo:
    return DocumentInfo(id=doc.id, knowledgebase_id=doc.kb_id, filename=doc.filename)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def _knowledge(ctx: AppContext) -> SearchClient:
    return required(ctx.clients.search, "knowledge")


def text_language(value: str | None, field: str) -> str | None:
    """ISO 639-3 code of a text's language given in ``field`` (None: not given), or the 400 naming the field.
    Besides the registry's spellings, the transcription codes of code-switched isiZulu (``cs-zul``) read as
    isiZulu."""
    try:
        return languages.normalise(value)
    except UnsupportedLanguage:
        if value is not None and languages.transcription_code(value) == languages.CODE_SWITCHED_ZULU:
            return "zul"
        raise InvalidInput(
            f"Invalid request: field '{field}': unknown language '{value}'; use {languages.ACCEPTED_HELP}."
        ) from None


def query_language(value: str | None) -> str | None:
    """ISO 639-3 code of a query's ``language`` (None: no preference), or the 400 naming the field."""
    return text_language(value, "language")


# --- knowledge bases -----------------------------------------------------------------------------------------


async def create_kb(ctx: AppContext, caller: Principal, name: str) -> KnowledgeBaseCreated:
    name = name.strip()
    if not name:
        raise InvalidInput("Invalid request: field 'knowledgebase_name' must not be empty.")
    _knowledge(ctx)  # 503 now rather than a knowledge base that can never hold documents

    def insert(session: Session) -> KnowledgeBaseCreated:
        kb = KnowledgeBase(customer_id=caller.customer_id, project_id=caller.project_id, name=name)
        session.add(kb)
        session.flush()
        return KnowledgeBaseCreated(id=kb.id, knowledgebase_name=kb.name)

    return await _db(ctx, insert)


async def list_kbs(ctx: AppContext, caller: Principal) -> list[KnowledgeBaseInfo]:
    def fetch(session: Session) -> list[KnowledgeBaseInfo]:
        kbs = session.scalars(
            select(KnowledgeBase)
            .where(KnowledgeBase.customer_id == caller.customer_id)
            .options(selectinload(KnowledgeBase.documents))
            .order_by(KnowledgeBase.created_at)
        ).all()
        return [
            KnowledgeBaseInfo(
                id=kb.id,
                knowledgebase_name=kb.name,
                documents=[_doc_info(d) for d in kb.documents if d.status == READY],
            )
            for kb in kbs
        ]

    return await _db(ctx, fetch)


async def delete_kb(ctx: AppContext, caller: Principal, kb_id: str) -> Deleted:
    kb_id = parse_id(kb_id)
    await _db(ctx, _owned_kb, caller, kb_id)
    await _knowledge(ctx).delete_kb(kb_id)  # vectors first: a failure here leaves the knowledge base intact

    def remove(session: Session) -> None:
        kb = session.get(KnowledgeBase, kb_id)
        if kb is not None:
            session.delete(kb)  # documents go with it (ORM cascade and ON DELETE CASCADE)

    await _db(ctx, remove)
    return Deleted(message="Knowledge base deleted.", id=kb_id)


# --- documents -----------------------------------------------------------------------------------------------


async def add_document(ctx: AppContext, caller: Principal, kb_id: str, request: Request) -> DocumentCreated:
    kb_id = parse_id(kb_id)
    await _db(ctx, _owned_kb, caller, kb_id)
    knowledge = _knowledge(ctx)
    limit = int(ctx.settings.search.max_document_mb * 1024 * 1024)
    upload = await receive_file(request, "file", limit, ctx.settings.data_dir / "uploads" / "documents")
    try:
        digest = await anyio.to_thread.run_sync(_sha256, upload.path)
        existing = await _db(ctx, _find_ready_copy, kb_id, digest)
        if existing is not None:
            return DocumentCreated(**existing.model_dump(), duplicate=True)
        await _sweep_stale(ctx, kb_id)

        def insert(session: Session) -> str:
            _owned_kb(session, caller, kb_id)  # still there
            doc = Document(
                kb_id=kb_id,
                customer_id=caller.customer_id,
                filename=upload.filename,
                content_sha256=digest,
                size_bytes=upload.size,
                status=INDEXING,
            )
            session.add(doc)
            session.flush()
            return doc.id

        doc_id = await _db(ctx, insert)
        # the Search deployment (any node) receives the bytes: inline when small, else through object storage
        content = await anyio.to_thread.run_sync(blob_from_file, ctx.settings, upload.path, upload.filename)
        file = DocumentFile(content=content, filename=upload.filename, content_type=upload.content_type)
        try:
            indexed = await knowledge.add_document(
                AddDocument(kb_id=kb_id, document_id=doc_id, customer_id=caller.customer_id, file=file)
            )
        except BaseException as exc:  # unreadable, failed or cancelled (client gone): nothing of it may stay
            await asyncio.shield(_discard_document(ctx, kb_id, doc_id))
            if isinstance(exc, EmptyDocument):
                raise exc.for_field("file") from None
            raise
        finally:
            await anyio.to_thread.run_sync(discard, ctx.settings, content)
    finally:
        upload.delete()
    return await _finish_document(ctx, caller, kb_id, doc_id, digest, indexed)


async def _finish_document(
    ctx: AppContext, caller: Principal, kb_id: str, doc_id: str, digest: str, indexed: IndexedDocument
) -> DocumentCreated:
    """Mark an indexed document ready, unless it (or its knowledge base) went meanwhile or a twin won."""

    def finish(session: Session) -> tuple[DocumentInfo | None, DocumentInfo | None]:
        doc = session.get(Document, doc_id)
        if doc is None:  # deleted (or its knowledge base was) while it was being indexed
            return None, None
        twin = _find_ready_copy(session, kb_id, digest)
        if twin is not None:  # the same file finished first in a concurrent upload
            session.delete(doc)
            return None, twin
        doc.status, doc.chunk_count, doc.language = READY, indexed.chunks, indexed.language
        doc.mime_type = indexed.mime_type
        return _doc_info(doc), None

    info, twin = await _db(ctx, finish)
    if info is None:
        await _knowledge(ctx).delete_document(kb_id, doc_id)
        if twin is not None:
            return DocumentCreated(**twin.model_dump(), duplicate=True)
        raise NotFound("Knowledge base not found: it was deleted while the document was being indexed.")
    await record_usage(ctx, caller, "knowledgebase_document", tokens=indexed.tokens, reference_id=doc_id)
    return DocumentCreated(**info.model_dump(), duplicate=False)


def _find_ready_copy(session: Session, kb_id: str, digest: str) -> DocumentInfo | None:
    doc = session.scalars(
        select(Document)
        .where(Document.kb_id == kb_id, Document.content_sha256 == digest, Document.status == READY)
        .order_by(Document.created_at)
        .limit(1)
    ).first()
    return _doc_info(doc) if doc is not None else None


async def _remove_document(ctx: AppContext, kb_id: str, doc_id: str) -> None:
    """Vectors, then the row (the row goes even when removing the vectors fails; that error is raised)."""
    try:
        await _knowledge(ctx).delete_document(kb_id, doc_id)
    finally:
        await _db(ctx, _drop_row, doc_id)


async def _discard_document(ctx: AppContext, kb_id: str, doc_id: str) -> None:
    """After a failed ingest: its vectors (best effort: the Search deployment already undid its own write), then its
    row. A failure here is logged, so the client gets the error of the ingest itself (415, 400, 503)."""
    try:
        await _knowledge(ctx).delete_document(kb_id, doc_id)
    except Exception:
        log.warning("could not remove the vectors of failed document %s", doc_id, exc_info=True)
    await _db(ctx, _drop_row, doc_id)


def _drop_row(session: Session, doc_id: str) -> None:
    doc = session.get(Document, doc_id)
    if doc is not None:
        session.delete(doc)


async def _sweep_stale(ctx: AppContext, kb_id: str) -> None:
    def stale(session: Session) -> list[str]:
        cutoff = utcnow() - STALE_INDEXING
        return list(
            session.scalars(
                select(Document.id).where(
                    Document.kb_id == kb_id, Document.status == INDEXING, Document.created_at < cutoff
                )
            )
        )

    for doc_id in await _db(ctx, stale):
        await _remove_document(ctx, kb_id, doc_id)


async def list_documents(ctx: AppContext, caller: Principal, kb_id: str) -> list[DocumentInfo]:
    kb_id = parse_id(kb_id)

    def fetch(session: Session) -> list[DocumentInfo]:
        kb = _owned_kb(session, caller, kb_id)
        return [_doc_info(d) for d in kb.documents if d.status == READY]

    return await _db(ctx, fetch)


async def delete_document(ctx: AppContext, caller: Principal, document_id: str) -> Deleted:
    document_id = parse_id(document_id, "document_id")

    def find(session: Session) -> str:
        doc = session.get(Document, document_id)
        if doc is None or doc.customer_id != caller.customer_id:
            raise NotFound("Document not found.")
        return doc.kb_id

    kb_id = await _db(ctx, find)
    await _remove_document(ctx, kb_id, document_id)
    return Deleted(message="Document deleted.", id=document_id)


# --- query ---------------------------------------------------------------------------------------------------


async def query(
    ctx: AppContext,
    caller: Principal,
    kb_id: str,
    text: str,
    language: str | None,
    top_k: int = 5,
    strict_language: bool = False,
) -> QueryResult:
    kb_id = parse_id(kb_id)
    if not text or not text.strip():
        raise InvalidInput("Invalid request: field 'query' must not be empty.")
    check_size(text, "query", TextLimits.of(ctx.settings))
    code = query_language(language)
    results = await _search(
        ctx,
        caller,
        kb_id,
        SearchQuery(kb_id=kb_id, text=text, language=code, strict_language=strict_language),
        top_k,
        lambda knowledge, request: knowledge.query(request),
    )
    await record_usage(ctx, caller, "knowledgebase_query", tokens=count_tokens(text))
    return QueryResult(search_result=results)


async def passages(ctx: AppContext, caller: Principal, kb_id: str, text: str, top_k: int) -> list[Passage]:
    """What an answer is grounded on (the ask route, the chat completions' knowledge base): the query route's
    ranking of ``text`` with each passage's chunk index and similarity. The text is checked by the caller, and
    the calling route meters."""
    kb_id = parse_id(kb_id)
    request = SearchQuery(kb_id=kb_id, text=text)
    return await _search(ctx, caller, kb_id, request, top_k, lambda knowledge, query: knowledge.passages(query))


Item = TypeVar("Item", bound=SearchResultItem)


async def _search(
    ctx: AppContext,
    caller: Principal,
    kb_id: str,
    request: SearchQuery,
    top_k: int,
    fetch: Callable[[SearchClient, SearchQuery], Awaitable[list[Item]]],
) -> list[Item]:
    """The ``top_k`` best passages of the caller's knowledge base (404 for an unknown or foreign one), those of
    documents still being indexed left out."""
    # The ownership check (with the documents still indexing, in one statement) and the search run at once (the
    # store checks the owner too, and the search is the slow part): an unknown or foreign knowledge base is a 404,
    # whatever the search. The search asks for ``top_k`` passages; only where one of them belongs to a document
    # still being indexed (an upload in flight) is it asked again, with those documents left out.
    request = request.model_copy(update={"top_k": top_k, "customer_id": caller.customer_id})
    knowledge = _knowledge(ctx)
    search = asyncio.ensure_future(fetch(knowledge, request))
    try:
        hidden = await _db(ctx, _documents_not_ready, caller, kb_id)
    except BaseException:
        search.cancel()
        search.add_done_callback(lambda done: done.cancelled() or done.exception())  # its error is not the answer
        raise
    hits = await search
    if any(hit.document_id in hidden for hit in hits):
        hits = await fetch(knowledge, request.model_copy(update={"exclude_documents": sorted(hidden)}))
    return hits

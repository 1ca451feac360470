"""Knowledge-base routes: knowledge bases, their documents, and queries over them."""

from __future__ import annotations

from fastapi import APIRouter, Request

from contracts.search import (
    CreateKnowledgeBase,
    Deleted,
    DocumentCreated,
    DocumentInfo,
    KnowledgeBaseCreated,
    KnowledgeBaseInfo,
    QueryRequest,
    QueryResult,
)
from serve_app.admission.kinds import DOCUMENTS, SEARCH, admitted_as, not_capacity_checked
from serve_app.auth import Caller, Ctx
from serve_app.services import search as service
from serve_app.uploads import multipart_openapi

router = APIRouter(prefix="/api/v1/search", tags=["knowledge bases"])


@router.post("/knowledgebase", response_model=KnowledgeBaseCreated)
@not_capacity_checked("creates the knowledge base's collection: management, no model work")
async def create_knowledgebase(body: CreateKnowledgeBase, caller: Caller, ctx: Ctx) -> KnowledgeBaseCreated:
    return await service.create_kb(ctx, caller, body.knowledgebase_name)


@router.get("/knowledgebases", response_model=list[KnowledgeBaseInfo])
async def list_knowledgebases(caller: Caller, ctx: Ctx) -> list[KnowledgeBaseInfo]:
    return await service.list_kbs(ctx, caller)


@router.delete("/knowledgebase/{knowledgebase_id}", response_model=Deleted)
@not_capacity_checked("deletes a collection: management, no model work")
async def delete_knowledgebase(knowledgebase_id: str, caller: Caller, ctx: Ctx) -> Deleted:
    return await service.delete_kb(ctx, caller, knowledgebase_id)


@router.post(
    "/knowledgebase/{knowledgebase_id}/document",
    response_model=DocumentCreated,
    openapi_extra=multipart_openapi("file", "Document: txt, md, pdf, docx, html, csv or json."),
)
@admitted_as(DOCUMENTS)
async def add_document(knowledgebase_id: str, request: Request, caller: Caller, ctx: Ctx) -> DocumentCreated:
    """The body is parsed by the service: it streams the file to disk and stops at the size limit."""
    return await service.add_document(ctx, caller, knowledgebase_id, request)


@router.get("/knowledgebase/{knowledgebase_id}/documents", response_model=list[DocumentInfo])
async def list_documents(knowledgebase_id: str, caller: Caller, ctx: Ctx) -> list[DocumentInfo]:
    return await service.list_documents(ctx, caller, knowledgebase_id)


@router.delete("/knowledgebase/document/{document_id}", response_model=Deleted)
@not_capacity_checked("deletes a document's chunks: management, no model work")
async def delete_document(document_id: str, caller: Caller, ctx: Ctx) -> Deleted:
    return await service.delete_document(ctx, caller, document_id)


@router.post("/knowledgebase/{knowledgebase_id}/query", response_model=QueryResult)
@admitted_as(SEARCH)
async def query(knowledgebase_id: str, body: QueryRequest, caller: Caller, ctx: Ctx) -> QueryResult:
    return await service.query(
        ctx, caller, knowledgebase_id, body.query, body.language, body.top_k, body.strict_language
    )

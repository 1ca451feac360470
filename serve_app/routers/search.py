"""Knowledge-base routes: knowledge bases, their documents, queries over them, and answers from them (``ask``, ours:
the extractive answerer on a fresh install, or the configured language model, every sentence checked)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from contracts.llm import AskRequest, AskResult
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
from serve_app.admission.kinds import DOCUMENTS, LLM, SEARCH, admitted_as, not_capacity_checked
from serve_app.auth import Caller, Ctx
from serve_app.services import ask as answers
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


_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The answer; with `stream`: server-sent events `citations` (first), `delta` (checked "
        "sentences), then `done` (the whole answer, as the JSON form) or `error`.",
        "content": {"text/event-stream": {}},
    }
}


@router.post("/knowledgebase/{knowledgebase_id}/ask", response_model=AskResult, responses=_STREAM)
@admitted_as(LLM)
async def ask(knowledgebase_id: str, body: AskRequest, caller: Caller, ctx: Ctx) -> AskResult | StreamingResponse:
    """Answer `question` from the knowledge base's documents only, citing the passages each sentence comes from;
    "I don't know from these documents." when they do not answer it."""
    return await answers.ask(ctx, caller, knowledgebase_id, body)

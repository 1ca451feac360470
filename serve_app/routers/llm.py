"""Answers from a knowledge base's documents, with citations: the language model (``llm``) over knowledge-base
search. 503 naming ``KHULUMA_LLM_MODEL`` while no language model is configured."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from contracts.llm import AskRequest, AskResult
from serve_app.auth import Caller, Ctx
from serve_app.services import llm as service

router = APIRouter(prefix="/api/v1/search", tags=["knowledge bases"])

_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The answer; with `stream`: server-sent events `citations` (first), `delta`, then `done` "
        "(the whole answer, as the JSON form) or `error`.",
        "content": {"text/event-stream": {}},
    }
}


@router.post("/knowledgebase/{knowledgebase_id}/ask", response_model=AskResult, responses=_STREAM)
async def ask(knowledgebase_id: str, body: AskRequest, caller: Caller, ctx: Ctx) -> AskResult | StreamingResponse:
    """Answer `question` from the knowledge base's documents only, citing the passages each sentence comes from;
    "I don't know from these documents." when they do not answer it."""
    return await service.ask(ctx, caller, knowledgebase_id, body)

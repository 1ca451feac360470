from __future__ import annotations

from pydantic import BaseModel, Field


class CreateKnowledgeBase(BaseModel):
    knowledgebase_name: str = Field(min_length=1, max_length=500)


class KnowledgeBaseCreated(BaseModel):
    id: str
    knowledgebase_name: str


class DocumentInfo(BaseModel):
    id: str
    knowledgebase_id: str
    filename: str


class KnowledgeBaseInfo(BaseModel):
    id: str
    knowledgebase_name: str
    documents: list[DocumentInfo]


class QueryRequest(BaseModel):
    query: str
    language: str | None = Field(default=None, description="e.g. zu_ZA, zul, zul_Latn, en; narrows/boosts results.")
    top_k: int = Field(default=5, ge=1, le=100)


class SearchResultItem(BaseModel):
    text: str
    score: float
    document_id: str | None = None
    filename: str | None = None


class QueryResult(BaseModel):
    search_result: list[SearchResultItem]


class Deleted(BaseModel):
    message: str
    id: str

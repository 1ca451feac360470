"""Wire models of the knowledge-base routes (result items are the KnowledgeStore's own, ``contracts.search``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from contracts.search import SearchResultItem
from contracts.unicode import UnicodeText


class CreateKnowledgeBase(BaseModel):
    knowledgebase_name: UnicodeText = Field(min_length=1, max_length=500)


class KnowledgeBaseCreated(BaseModel):
    id: str
    knowledgebase_name: str


class DocumentInfo(BaseModel):
    id: str
    knowledgebase_id: str
    filename: str


class DocumentCreated(DocumentInfo):
    duplicate: bool = Field(
        default=False,
        description="True when this knowledge base already held a file with the same content: the existing "
        "document is returned and nothing is indexed again.",
    )


class KnowledgeBaseInfo(BaseModel):
    id: str
    knowledgebase_name: str
    documents: list[DocumentInfo]


class QueryRequest(BaseModel):
    query: UnicodeText
    language: UnicodeText | None = Field(
        default=None,
        description="Language of the wanted passages; boosts results in it (see `strict_language`). Accepted: "
        "afr, eng, zul, xho, sot, nso, tsn, ssw, tso, ven, nbl, swh, sna, fra as ISO 639-3 (zul), ISO 639-1 "
        "(zu), a locale (zu_ZA, zu-ZA), an NLLB code (zul_Latn) or an English name (isiZulu). Null: no preference.",
    )
    top_k: int = Field(default=5, ge=1, le=100, description="How many passages to return.")
    strict_language: bool = Field(
        default=False, description="Return only passages detected as `language` (default: boost, not filter)."
    )


class QueryResult(BaseModel):
    search_result: list[SearchResultItem]


class Deleted(BaseModel):
    message: str
    id: str

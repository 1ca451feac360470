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
    query: str
    language: str | None = Field(
        default=None,
        description="Language of the wanted passages; boosts results in it (see `strict_language`). Accepted: "
        "afr, eng, zul, xho, sot, nso, tsn, ssw, tso, ven, nbl, swh, sna, fra as ISO 639-3 (zul), ISO 639-1 "
        "(zu), a locale (zu_ZA, zu-ZA), an NLLB code (zul_Latn) or an English name (isiZulu). Null: no preference.",
    )
    top_k: int = Field(default=5, ge=1, le=100, description="How many passages to return.")
    strict_language: bool = Field(
        default=False, description="Return only passages detected as `language` (default: boost, not filter)."
    )


class SearchResultItem(BaseModel):
    text: str
    score: float = Field(description="0..1, descending: fused rank score (1 = first by meaning and by words).")
    document_id: str | None = None
    filename: str | None = None
    language: str | None = Field(default=None, description="ISO 639-3 detected for this passage ('und': unsure).")
    start: int | None = Field(default=None, description="Character offset of the passage in the document's text.")
    end: int | None = None


class QueryResult(BaseModel):
    search_result: list[SearchResultItem]


class Deleted(BaseModel):
    message: str
    id: str

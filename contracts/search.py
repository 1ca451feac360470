"""Contract of the Search deployment: its request and result models, and the typed handle callers use.

The ingress owns knowledge bases and document rows (tenancy, duplicates, usage); the Search deployment owns what is
derived from a document's content: its text, chunks, languages, vectors and the BM25 index.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from contracts.errors import InvalidInput
from contracts.handles import DeploymentClient
from contracts.payloads import Blob
from contracts.unicode import UnicodeText

SearchMode = Literal["hybrid", "vector", "lexical"]


class EmptyDocument(InvalidInput):
    """A readable document without any text (a scanned PDF without a text layer). Its ``detail`` names no request
    field: the service adds the one that carried the file (:meth:`for_field`)."""

    def for_field(self, field: str) -> InvalidInput:
        return InvalidInput(f"Field '{field}': {self.detail}")


class DocumentFile(BaseModel):
    """An uploaded document as the Search deployment receives it: its bytes (inline or in object storage;
    ``contracts/payloads.py``), never a path, so the store may run on any node."""

    content: Blob
    filename: str = Field(
        description="The client's (sanitised) file name: the format's first hint, and what results show."
    )
    content_type: str | None = Field(default=None, description="The declared content type of the upload.")


class AddDocument(BaseModel):
    """Parse, chunk, detect languages, embed and store one document of a knowledge base."""

    kb_id: str
    document_id: str
    customer_id: int
    file: DocumentFile


class IndexedDocument(BaseModel):
    document_id: str
    chunks: int
    language: str = Field(description="ISO 639-3 code covering most of the text; 'und' when unsure.")
    mime_type: str = Field(description="The document's format as read (text/plain, application/pdf, ...).")
    tokens: int = Field(description="Whitespace tokens of the extracted text: the unit of usage metering.")


class SearchQuery(BaseModel):
    """A query as the Search deployment runs it; the ingress has checked the text and normalised ``language``."""

    kb_id: str
    text: str
    language: str | None = Field(default=None, description="ISO 639-3 code; None: no preference.")
    top_k: int = 5
    customer_id: int | None = Field(default=None, description="Checked against the knowledge base's owner.")
    strict_language: bool = False
    mode: SearchMode | None = Field(default=None, description="Default: the deployment's configuration.")
    exclude_documents: list[str] = Field(
        default_factory=list, description="Documents whose passages are left out (those still being indexed)."
    )


class SearchResultItem(BaseModel):
    """One passage of a query's answer (also the wire shape of ``search_result`` items)."""

    text: str
    score: float = Field(description="0..1, descending: fused rank score (1 = first by meaning and by words).")
    document_id: str | None = None
    filename: str | None = None
    language: str | None = Field(default=None, description="ISO 639-3 detected for this passage ('und': unsure).")
    start: int | None = Field(default=None, description="Character offset of the passage in the document's text.")
    end: int | None = None


class Passage(SearchResultItem):
    """A passage as an answer is grounded on: a query's result item with where it sits in its document and how close
    it is to the question by meaning (what the ask route's refusal rule reads)."""

    chunk_index: int | None = Field(default=None, description="The passage's position among its document's chunks.")
    similarity: float | None = Field(
        default=None,
        description="Cosine similarity of the query and the passage in the embedding model's space; None when the "
        "vector side did not find it among its candidates (it came from BM25 alone).",
    )


class ExtractRequest(BaseModel):
    """Choose the sentences of ``passages`` (in rank order) that answer ``question`` (the extractive answerer)."""

    question: str
    passages: list[str]


class ExtractedSentence(BaseModel):
    source: int = Field(description="Index into the request's passages of the passage it is quoted from.")
    text: str = Field(description="The sentence, exactly as the passage has it.")
    score: float = Field(description="How well it answers the question (similarity plus coverage; higher is better).")


class Extraction(BaseModel):
    """The extractive answerer's answer: the quoted sentences, best first (empty when the passages do not answer
    the question)."""

    sentences: list[ExtractedSentence] = Field(default_factory=list)
    model: str = Field(description="The embedding model that ranked the sentences.")


class SearchClient(DeploymentClient):
    """Typed handle of ``deployments.search:Search``."""

    deployment = "Search"

    async def add_document(self, request: AddDocument) -> IndexedDocument:
        """deployments.search.Search.add_document"""
        return await self._call(self._handle.add_document.remote(request))

    async def delete_document(self, kb_id: str, document_id: str) -> int:
        """deployments.search.Search.delete_document: how many chunks were removed."""
        return await self._call(self._handle.delete_document.remote(kb_id, document_id))

    async def delete_kb(self, kb_id: str) -> bool:
        """deployments.search.Search.delete_kb: False when it held no vectors."""
        return await self._call(self._handle.delete_kb.remote(kb_id))

    async def query(self, request: SearchQuery) -> list[SearchResultItem]:
        """deployments.search.Search.query: best first."""
        return await self._call(self._handle.query.remote(request))

    async def passages(self, request: SearchQuery) -> list[Passage]:
        """deployments.search.Search.passages: best first, as :meth:`query` ranks them, with chunk indexes and
        similarities."""
        return await self._call(self._handle.passages.remote(request))

    async def extract(self, request: ExtractRequest) -> Extraction:
        """deployments.search.Search.extract: the passage sentences that answer the question (the extractive
        answerer, with the embedder this deployment has loaded already)."""
        return await self._call(self._handle.extract.remote(request))


# --- wire models of the routes (what only the HTTP edge reads and writes) ---


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

"""Contract of the KnowledgeStore deployment: its request and result models, and the typed handle callers use.

The ingress owns knowledge bases and document rows (tenancy, duplicates, usage); the KnowledgeStore owns what is
derived from a document's content: its text, chunks, languages, vectors and the BM25 index.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from contracts.errors import InvalidInput
from contracts.handles import DeploymentClient
from contracts.payloads import Blob

SearchMode = Literal["hybrid", "vector", "lexical"]


class EmptyDocument(InvalidInput):
    """A readable document without any text (a scanned PDF without a text layer). Its ``detail`` names no request
    field: the service adds the one that carried the file (:meth:`for_field`)."""

    def for_field(self, field: str) -> InvalidInput:
        return InvalidInput(f"Field '{field}': {self.detail}")


class DocumentFile(BaseModel):
    """An uploaded document as the KnowledgeStore receives it: its bytes (inline or in object storage;
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
    """A query as the KnowledgeStore runs it; the ingress has checked the text and normalised ``language``."""

    kb_id: str
    text: str
    language: str | None = Field(default=None, description="ISO 639-3 code; None: no preference.")
    top_k: int = 5
    customer_id: int | None = Field(default=None, description="Checked against the knowledge base's owner.")
    strict_language: bool = False
    mode: SearchMode | None = Field(default=None, description="Default: the deployment's configuration.")


class SearchResultItem(BaseModel):
    """One passage of a query's answer (also the wire shape of ``search_result`` items)."""

    text: str
    score: float = Field(description="0..1, descending: fused rank score (1 = first by meaning and by words).")
    document_id: str | None = None
    filename: str | None = None
    language: str | None = Field(default=None, description="ISO 639-3 detected for this passage ('und': unsure).")
    start: int | None = Field(default=None, description="Character offset of the passage in the document's text.")
    end: int | None = None


class KnowledgeClient(DeploymentClient):
    """Typed handle of ``deployments.knowledge:KnowledgeStore``."""

    deployment = "KnowledgeStore"

    async def add_document(self, request: AddDocument) -> IndexedDocument:
        """deployments.knowledge.KnowledgeStore.add_document"""
        return await self._call(self._handle.add_document.remote(request))

    async def delete_document(self, kb_id: str, document_id: str) -> int:
        """deployments.knowledge.KnowledgeStore.delete_document: how many chunks were removed."""
        return await self._call(self._handle.delete_document.remote(kb_id, document_id))

    async def delete_kb(self, kb_id: str) -> bool:
        """deployments.knowledge.KnowledgeStore.delete_kb: False when it held no vectors."""
        return await self._call(self._handle.delete_kb.remote(kb_id))

    async def query(self, request: SearchQuery) -> list[SearchResultItem]:
        """deployments.knowledge.KnowledgeStore.query: best first."""
        return await self._call(self._handle.query.remote(request))

"""Settings of knowledge bases (``KHULUMA_SEARCH_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class SearchSettings(BaseModel):
    """Knowledge bases: documents, chunking, retrieval."""

    model_config = ConfigDict(extra="ignore")
    chroma_url: str | None = Field(
        default=None,
        description="URL of a Chroma server (cluster mode). Unset: one deployment owns an embedded store "
        "under `<data_dir>/chroma`.",
    )
    max_document_mb: float = Field(default=50.0, description="Largest document upload, in MB.")
    chroma_path: Path | None = Field(
        default=None,
        description="Directory of the embedded Chroma store (default `<data_dir>/chroma`). One process only.",
    )
    lock_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        description="How long a starting Search waits for another process to release the embedded store.",
    )
    chunk_chars: int = Field(default=800, ge=100, description="Largest chunk of a document, in characters.")
    chunk_overlap_chars: int = Field(
        default=150, ge=0, description="Characters (whole sentences) a chunk repeats from the previous one."
    )
    max_document_chunks: int = Field(
        default=1000,
        ge=1,
        description="Most chunks (passages) one document may be split into; more is refused with 413 before any "
        "embedding. Each chunk costs an embedding, so the bound keeps a document's indexing within the request "
        "timeout (docs/search.md, hostile documents). Raise it with a faster embedder (a GPU) and the request "
        "timeout together.",
    )
    hybrid: bool = Field(
        default=True, description="Fuse BM25 with vector search (reciprocal rank fusion). False: vector only."
    )
    candidates: int = Field(
        default=50, ge=5, description="Candidates each retriever (vector, BM25) hands to the fusion."
    )
    rrf_k: float = Field(default=60.0, gt=0, description="Reciprocal rank fusion constant k.")
    language_boost: float = Field(
        default=0.02,
        ge=0,
        description="Score bonus (fraction) for chunks in the query's `language`. 0.02 is about one rank step in "
        "reciprocal rank fusion (a tie-breaker that keeps cross-lingual answers); larger values prefer the language "
        "more strongly; `strict_language` filters instead.",
    )
    bm25_cache_kbs: int = Field(default=16, ge=1, description="Knowledge bases whose BM25 index stays in memory (LRU).")
    warm_kbs: int = Field(
        default=4,
        ge=0,
        description="Knowledge bases whose indexes a Search replica loads when it starts (those used last, "
        "at most `bm25_cache_kbs`, each from a BM25 snapshot of its current generation): their first query after a "
        "restart does not wait for its BM25 snapshot and vector index to be read (docs/performance.md). "
        "The replica reports ready once they are loaded, or after 5 s, and loads the rest in the background. 0: "
        "load each on its first query. Each costs its memory from the start.",
    )
    bm25_snapshot_dir: Path | None = Field(
        default=None,
        description="Where the Search deployment saves each knowledge base's BM25 index (default `<data_dir>/bm25`, "
        "local to the node: a cache, never shared). A saved index of the collection's current generation is read "
        "instead of fetching and tokenizing every chunk from Chroma on the first query after a restart.",
    )
    bm25_snapshot_delay_seconds: float = Field(
        default=2.0,
        ge=0,
        description="How long after its last change a BM25 index is saved (uploads in a row are saved once).",
    )
    extract_max_expanded_mb: float = Field(
        default=100.0,
        gt=0,
        description="Largest uncompressed size of a zip-based document (.docx), all members together, in MB. "
        "Both the sizes the archive declares and the bytes actually decompressed are counted (a small .docx can "
        "expand to gigabytes: docs/search.md, hostile documents); beyond it the upload is refused with 413.",
    )
    extract_max_pages: int = Field(
        default=2000,
        ge=1,
        description="Most pages read from a PDF (declared in its page tree, or actually walked); a PDF with more "
        "is refused with 413.",
    )
    extract_max_chars: int = Field(
        default=5_000_000,
        ge=1000,
        description="Most characters of text extracted from one document (about 2,500 pages of prose); a document "
        "that yields more is refused with 413.",
    )
    extract_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Wall time one document's text extraction may take. Extraction runs in a child process that "
        "is killed past this time (413: too large or complex to read).",
    )
    extract_memory_mb: int = Field(
        default=1024,
        ge=256,
        description="Address-space limit (RLIMIT_AS) of the child process that extracts a document's text, in MB; "
        "a document that needs more to parse is refused with 413 and the memory is returned when the child exits.",
    )

"""Hybrid retrieval over Chroma: vector search + BM25, fused by reciprocal rank, with a language boost.

Pieces (no HTTP, no Ray):

- :func:`normalise_language` turns ``zu_ZA``, ``zu``, ``zul``, ``zul_Latn``, ``isiZulu`` ... into ISO 639-3.
- :func:`detect_languages` labels chunks at ingest (the text-analysis language identifier when present,
  otherwise ``lingua`` restricted to the languages we serve).
- :class:`ChunkStore` wraps a Chroma client (embedded ``PersistentClient`` or ``HttpClient``). One collection per
  knowledge base, named ``kb-<uuid>``; its metadata carries the owner's customer id and a *generation* token that
  changes on every write (BM25 caches compare it, so several replicas in cluster mode never serve stale text).
  Embeddings are always passed in: Chroma's default embedding function is never used (never downloaded).
- :class:`Bm25Index` (``bm25s``) over the chunk texts of one knowledge base, with a tokenizer that keeps numbers
  whole, drops function words of English, Afrikaans, isiZulu and Sesotho and also indexes the stem of
  prefixed names (``eThekwini`` -> ``ethekwini`` + ``thekwini``).
- :func:`fuse` - weighted reciprocal rank fusion, a multiplicative boost for chunks in the requested language,
  scores scaled to 0..1 (1 = first in every list and in the requested language).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import numpy as np

# --- languages -----------------------------------------------------------------------------------------------

LANGUAGE_NAMES: dict[str, str] = {
    "afr": "Afrikaans", "eng": "English", "zul": "isiZulu", "xho": "isiXhosa", "sot": "Sesotho",
    "nso": "Sepedi (Northern Sotho)", "tsn": "Setswana", "ssw": "siSwati", "tso": "Xitsonga", "ven": "Tshivenda",
    "nbl": "isiNdebele", "swh": "Kiswahili", "sna": "chiShona", "fra": "French",
}
_ALIASES: dict[str, str] = {
    # ISO 639-1
    "af": "afr", "en": "eng", "zu": "zul", "xh": "xho", "st": "sot", "tn": "tsn", "ss": "ssw", "ts": "tso",
    "ve": "ven", "nr": "nbl", "sw": "swh", "sn": "sna", "fr": "fra",
    # other ISO 639-2/3 forms
    "swa": "swh", "fre": "fra", "ped": "nso",
    # names
    "afrikaans": "afr", "english": "eng", "zulu": "zul", "isizulu": "zul", "xhosa": "xho", "isixhosa": "xho",
    "sesotho": "sot", "sotho": "sot", "southern sotho": "sot", "sepedi": "nso", "pedi": "nso",
    "northern sotho": "nso", "sesotho sa leboa": "nso", "setswana": "tsn", "tswana": "tsn", "siswati": "ssw",
    "swati": "ssw", "xitsonga": "tso", "tsonga": "tso", "tshivenda": "ven", "venda": "ven",
    "isindebele": "nbl", "ndebele": "nbl", "kiswahili": "swh", "swahili": "swh", "shona": "sna",
    "chishona": "sna", "french": "fra", "francais": "fra", "français": "fra",
    # code-switched isiZulu (the transcription codes)
    "cs_zul": "zul", "cs_zu": "zul",
}
ACCEPTED_LANGUAGES_HELP = (
    "a language of " + ", ".join(sorted(LANGUAGE_NAMES)) + " written as ISO 639-3 (zul), ISO 639-1 (zu), "
    "a locale (zu_ZA, zu-ZA), an NLLB code (zul_Latn) or an English name (isiZulu)"
)


def normalise_language(value: str | None) -> str | None:
    """ISO 639-3 code for the accepted spellings; ``None``/empty -> ``None``; anything else -> ValueError."""
    if value is None:
        return None
    key = value.strip().lower().replace("-", "_")
    if not key or key in ("auto", "none", "null", "any"):
        return None
    if key in _ALIASES:
        return _ALIASES[key]
    if key in LANGUAGE_NAMES:
        return key
    head = key.split("_")[0]
    if head in _ALIASES:
        return _ALIASES[head]
    if head in LANGUAGE_NAMES:
        return head
    raise ValueError(f"unknown language '{value}'; use {ACCEPTED_LANGUAGES_HELP}")


_lingua_lock = threading.Lock()
_lingua_detector: Any = None


def _lingua() -> Any:
    global _lingua_detector
    with _lingua_lock:
        if _lingua_detector is None:
            from lingua import Language, LanguageDetectorBuilder

            names = {"eng": "ENGLISH", "afr": "AFRIKAANS", "zul": "ZULU", "xho": "XHOSA", "sot": "SOTHO",
                     "tsn": "TSWANA", "tso": "TSONGA", "swh": "SWAHILI", "sna": "SHONA", "fra": "FRENCH"}
            languages = [getattr(Language, names[code]) for code in _LINGUA_CODES]
            _lingua_detector = LanguageDetectorBuilder.from_languages(*languages).build()
        return _lingua_detector


def _lingua_detect(texts: Sequence[str]) -> list[str | None]:
    results = _lingua().detect_languages_in_parallel_of(list(texts))
    out: list[str | None] = []
    for lang in results:
        code = lang.iso_code_639_3.name.lower() if lang is not None else None
        out.append(_ALIASES.get(code, code) if code else None)
    return out


_identifier_lock = threading.Lock()
_identifier: Any = None
MIN_LANGUAGE_CONFIDENCE = 0.5


def _text_analysis_identifier() -> Any:
    """The text-analysis language identifier (``engines.langid``: lingua + an n-gram model that separates
    nso/sot/tsn and ssw/zul/xho), or None when this build lacks it."""
    global _identifier
    with _identifier_lock:
        if _identifier is None:
            try:
                from engines.langid import LanguageIdentifier
            except ImportError:
                _identifier = False
            else:
                _identifier = LanguageIdentifier()
        return _identifier or None


def detect_languages(texts: Sequence[str]) -> list[str | None]:
    """ISO 639-3 code per text, or None when the identifier is unsure (confidence below 0.5)."""
    if not texts:
        return []
    identifier = _text_analysis_identifier()
    if identifier is None:
        return _lingua_detect(texts)
    guesses = identifier.detect_many(list(texts))
    return [g.language if g.confidence >= MIN_LANGUAGE_CONFIDENCE else None for g in guesses]


_LINGUA_CODES = ("eng", "afr", "zul", "xho", "sot", "tsn", "tso", "swh", "sna", "fra")


def detectable_languages() -> tuple[str, ...]:
    """Languages the ingest-time detector can assign to a chunk."""
    identifier = _text_analysis_identifier()
    return tuple(identifier.languages) if identifier is not None else _LINGUA_CODES


def dominant_language(languages: Sequence[str | None], weights: Sequence[int] | None = None) -> str | None:
    tally: dict[str, int] = {}
    for i, lang in enumerate(languages):
        if lang:
            tally[lang] = tally.get(lang, 0) + (weights[i] if weights else 1)
    return max(tally, key=tally.__getitem__) if tally else None


# --- lexical side: tokenizer and BM25 ------------------------------------------------------------------------

_STOPWORDS: frozenset[str] = frozenset("""
a an and are as at be been but by can could did do does for from had has have he her his how i if in into is
it its me my no not of on or our she so than that the their them then there these they this to was we were
what when where which who whom why will with would you your about also am any all just may might must
die en van n is in op te vir met wat wie waar hoe wanneer het was nie om aan by sy hy ek jy ons hulle dit of
as ook maar na word kan sal moet mag daar hier ja hoeveel watter al baie dat deur hul jou my se sodat want
na ne no nga nge ngo ku kwa e u i uma futhi kodwa lapho ini yini kanjani nini kuphi ubani ngubani le lo la
leli lesi lezi lokho kanye noma kakhulu ukuthi ngabe yiziphi yimuphi ukuze ngoba kanti kepha ngakho nje
manje khona zonke wonke yonke bonke konke lokhu lawa labo laba leyo lowo malini yimalini ngani kungani
ya ka ho ba sa tsa wa ke ha hore mme empa eng kae neng jwang mang sena seo tse tseo ona hae bona hona di
efe kang hobane kapa hape feela kaofela bokae hoo moo
""".split())
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|\w+", re.UNICODE)
# uMandela, eThekwini, kwaZulu, ngoMandela: a lower-case class prefix glued to a capitalised name
_PREFIXED_NAME = re.compile(r"(?<!\w)[a-z]{1,3}([A-Z]\w{2,})(?!\w)")


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens for BM25: numbers whole (thousands separators dropped), function words and single
    letters dropped, and the stems of prefixed names added (``eThekwini`` -> ``ethekwini``, ``thekwini``)."""
    tokens = [t.replace(",", "") if t[0].isdigit() else t for t in _TOKEN.findall(text.lower())
              if t not in _STOPWORDS and (len(t) > 1 or t.isdigit())]
    tokens.extend(stem.lower() for stem in _PREFIXED_NAME.findall(text))
    return tokens


_fast_bm25: Any = None


def _bm25_class() -> Any:
    """``bm25s.BM25`` with its documented ``build_index_from_ids`` hook vectorised in numpy (the stock one loops
    over documents in Python: ~6 s instead of ~1 s for 100k chunks). Same Lucene BM25 scores."""
    global _fast_bm25
    if _fast_bm25 is None:
        import bm25s
        import scipy.sparse as sparse

        class FastBM25(bm25s.BM25):
            def build_index_from_ids(  # type: ignore[no-untyped-def]
                    self, unique_token_ids, corpus_token_ids, show_progress=True, leave_progress=False):
                if self.method != "lucene":
                    return super().build_index_from_ids(unique_token_ids, corpus_token_ids, show_progress,
                                                        leave_progress)
                self.nonoccurrence_array = None  # only BM25L/BM25+ use it
                n_docs, n_vocab = len(corpus_token_ids), len(unique_token_ids)
                lengths = np.fromiter((len(d) for d in corpus_token_ids), dtype=np.int64, count=n_docs)
                flat = (np.concatenate([np.asarray(d, dtype=np.int64) for d in corpus_token_ids])
                        if n_docs else np.zeros(0, dtype=np.int64))
                docs = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
                keys, tf = np.unique(docs * n_vocab + flat, return_counts=True)
                doc_idx, voc_idx = keys // n_vocab, keys % n_vocab
                df = np.bincount(voc_idx, minlength=n_vocab)
                idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
                avg = float(lengths.mean()) if n_docs else 1.0
                tf = tf.astype(np.float64)
                tfc = tf / (self.k1 * ((1 - self.b) + self.b * lengths[doc_idx] / avg) + tf)
                matrix = sparse.csc_matrix(((idf[voc_idx] * tfc).astype(self.dtype), (doc_idx, voc_idx)),
                                           shape=(n_docs, n_vocab), dtype=self.dtype)
                return {"data": matrix.data, "indices": matrix.indices, "indptr": matrix.indptr,
                        "num_docs": n_docs}

        _fast_bm25 = FastBM25
    return _fast_bm25


class Bm25Index:
    """BM25 over one knowledge base's chunks.

    The corpus (text, metadata and token ids per chunk) can change by whole documents (:meth:`add`,
    :meth:`remove_document`); the bm25s index is rebuilt from the cached token ids at the next search after a
    change, so nothing is fetched from Chroma or tokenized again.
    """

    def __init__(self, ids: list[str] = (), texts: list[str] = (), metadatas: list[dict[str, Any]] = ()) -> None:
        self.vocab: dict[str, int] = {}
        self.chunks: dict[str, tuple[str, dict[str, Any], np.ndarray]] = {}
        self._retriever: Any = None
        self._order: list[str] = []
        self._lock = threading.Lock()
        self.add(list(ids), list(texts), list(metadatas))

    def __len__(self) -> int:
        return len(self.chunks)

    def add(self, ids: list[str], texts: list[str], metadatas: list[dict[str, Any]]) -> None:
        with self._lock:
            for chunk_id, text, meta in zip(ids, texts, metadatas):
                token_ids = [self.vocab.setdefault(t, len(self.vocab)) for t in tokenize(text)]
                self.chunks[chunk_id] = (text, dict(meta), np.asarray(token_ids, dtype=np.int32))
            self._retriever = None

    def remove_document(self, document_id: str) -> None:
        with self._lock:
            for chunk_id in [c for c, (_, m, _) in self.chunks.items() if m.get("document_id") == document_id]:
                del self.chunks[chunk_id]
            self._retriever = None

    def _build(self) -> None:  # caller holds the lock
        from bm25s.tokenization import Tokenized

        order = list(self.chunks)
        retriever = _bm25_class()()
        retriever.index(Tokenized(ids=[self.chunks[c][2] for c in order], vocab=dict(self.vocab)),
                        create_empty_token=False, show_progress=False)
        self._retriever, self._order = retriever, order

    def search(self, query: str, k: int, language: str | None = None) -> list[tuple[str, float]]:
        """Top ``k`` (id, score) with a positive score; ``language`` keeps only chunks in that language."""
        return [(chunk_id, score) for chunk_id, score, _, _ in self.search_chunks(query, k, language)]

    def search_chunks(self, query: str, k: int, language: str | None = None
                      ) -> list[tuple[str, float, str, dict[str, Any]]]:
        """Like :meth:`search`, with each chunk's text and metadata."""
        with self._lock:
            token_ids = [self.vocab[t] for t in tokenize(query) if t in self.vocab]
            if not self.chunks or not token_ids:
                return []
            if self._retriever is None:
                self._build()
            order = self._order
            scores = self._retriever.get_scores(token_ids)
            if language is not None:
                mask = np.array([self.chunks[c][1].get("language") == language for c in order], dtype=bool)
                scores = np.where(mask, scores, 0.0)
            k = min(k, len(scores))
            top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            return [(order[i], float(scores[i]), self.chunks[order[i]][0], dict(self.chunks[order[i]][1]))
                    for i in top if scores[i] > 0]


# --- fusion --------------------------------------------------------------------------------------------------

@dataclass
class Hit:
    id: str
    text: str
    metadata: dict[str, Any]
    score: float = 0.0
    vector_rank: int | None = None
    lexical_rank: int | None = None
    similarity: float | None = None  # cosine similarity to the query, when the vector side found it


@dataclass
class FusionConfig:
    rrf_k: float = 60.0
    vector_weight: float = 1.0
    lexical_weight: float = 1.0
    language_boost: float = 0.02  # multiplicative bonus for chunks in the requested language
    extra: dict[str, Any] = field(default_factory=dict)


def fuse(vector_hits: list[Hit], lexical_hits: list[Hit], config: FusionConfig,
         language: str | None = None) -> list[Hit]:
    """Weighted reciprocal rank fusion of two rankings, language boost, scores scaled to 0..1."""
    merged: dict[str, Hit] = {}
    for rank, hit in enumerate(vector_hits, 1):
        hit.vector_rank = rank
        hit.score = config.vector_weight / (config.rrf_k + rank)
        merged[hit.id] = hit
    for rank, hit in enumerate(lexical_hits, 1):
        bonus = config.lexical_weight / (config.rrf_k + rank)
        if hit.id in merged:
            merged[hit.id].lexical_rank = rank
            merged[hit.id].score += bonus
        else:
            hit.lexical_rank, hit.score = rank, bonus
            merged[hit.id] = hit
    best = (config.vector_weight + (config.lexical_weight if lexical_hits else 0.0)) / (config.rrf_k + 1)
    if language is not None:
        best *= 1.0 + config.language_boost
        for hit in merged.values():
            if hit.metadata.get("language") == language:
                hit.score *= 1.0 + config.language_boost
    for hit in merged.values():
        hit.score = round(hit.score / best, 6) if best > 0 else 0.0
    return sorted(merged.values(), key=lambda h: (-h.score, h.vector_rank or 10**9))


# --- vector store --------------------------------------------------------------------------------------------

def collection_name(kb_id: str) -> str:
    return f"kb-{uuid.UUID(str(kb_id)).hex}"


def chroma_settings() -> Any:
    from chromadb.config import Settings as ChromaSettings

    return ChromaSettings(anonymized_telemetry=False, allow_reset=False)


def connect_chroma(path: str | None = None, url: str | None = None) -> Any:
    """An embedded PersistentClient at ``path`` or an HttpClient for ``url`` (http[s]://host:port)."""
    import chromadb

    if url:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        ssl = parsed.scheme == "https"
        port = parsed.port or (443 if ssl else 8000)
        return chromadb.HttpClient(host=parsed.hostname or "localhost", port=port, ssl=ssl,
                                   settings=chroma_settings())
    if not path:
        raise ValueError("either a path or a url is needed")
    return chromadb.PersistentClient(path=str(path), settings=chroma_settings())


class ChunkStore:
    """Chunks of each knowledge base in their own Chroma collection (vectors, text, metadata)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        try:
            self.max_batch = int(client.get_max_batch_size())
        except Exception:  # noqa: BLE001 - older servers
            self.max_batch = 1000
        self.max_batch = max(1, min(self.max_batch, 5000))

    def _collection(self, kb_id: str, create: bool = False, customer_id: int | None = None) -> Any:
        from chromadb.errors import NotFoundError

        name = collection_name(kb_id)
        if create:
            return self.client.get_or_create_collection(
                name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}},
                metadata={"kb_id": str(kb_id), "customer_id": int(customer_id or 0),
                          "generation": uuid.uuid4().hex},
            )
        try:
            return self.client.get_collection(name, embedding_function=None)
        except (NotFoundError, ValueError):
            return None

    def owner(self, kb_id: str) -> int | None:
        col = self._collection(kb_id)
        return None if col is None else int((col.metadata or {}).get("customer_id") or 0)

    def generation(self, kb_id: str) -> str | None:
        col = self._collection(kb_id)
        return None if col is None else str((col.metadata or {}).get("generation"))

    def _touch(self, col: Any) -> tuple[str | None, str]:
        """New generation token; returns (previous, new)."""
        meta = dict(col.metadata or {})
        previous = meta.get("generation")
        meta["generation"] = uuid.uuid4().hex
        col.modify(metadata=meta)
        return (str(previous) if previous is not None else None), meta["generation"]

    def add(self, kb_id: str, customer_id: int | None, ids: list[str], embeddings: np.ndarray,
            texts: list[str], metadatas: list[dict[str, Any]]) -> tuple[str | None, str]:
        """Store chunks; returns the collection's (previous, new) generation."""
        col = self._collection(kb_id, create=True, customer_id=customer_id)
        try:
            for lo in range(0, len(ids), self.max_batch):
                hi = lo + self.max_batch
                col.add(ids=ids[lo:hi], embeddings=np.asarray(embeddings[lo:hi], dtype=np.float32),
                        documents=texts[lo:hi], metadatas=metadatas[lo:hi])
        except BaseException:
            self._touch(col)
            raise
        return self._touch(col)

    def delete_document(self, kb_id: str, document_id: str) -> tuple[int, tuple[str | None, str] | None]:
        """Remove a document's chunks; returns (how many, the (previous, new) generation or None)."""
        col = self._collection(kb_id)
        if col is None:
            return 0, None
        before = col.count()
        col.delete(where={"document_id": document_id})
        change = self._touch(col)
        return before - col.count(), change

    def delete_kb(self, kb_id: str) -> bool:
        from chromadb.errors import NotFoundError

        try:
            self.client.delete_collection(collection_name(kb_id))
            return True
        except (NotFoundError, ValueError):
            return False

    def count(self, kb_id: str, document_id: str | None = None) -> int:
        col = self._collection(kb_id)
        if col is None:
            return 0
        if document_id is None:
            return int(col.count())
        return len(col.get(where={"document_id": document_id}, include=[])["ids"])

    def exists(self, kb_id: str) -> bool:
        return self._collection(kb_id) is not None

    def vector_search(self, kb_id: str, embedding: np.ndarray, k: int, language: str | None = None) -> list[Hit]:
        col = self._collection(kb_id)
        if col is None:
            return []
        result = col.query(query_embeddings=np.asarray(embedding, dtype=np.float32).reshape(1, -1),
                           n_results=k, where={"language": language} if language else None,
                           include=["documents", "metadatas", "distances"])
        hits = []
        for chunk_id, text, meta, dist in zip(result["ids"][0], result["documents"][0], result["metadatas"][0],
                                              result["distances"][0]):
            hits.append(Hit(chunk_id, text or "", dict(meta or {}), similarity=1.0 - float(dist)))
        return hits

    def all_chunks(self, kb_id: str, page: int = 5000) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        col = self._collection(kb_id)
        ids: list[str] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        if col is None:
            return ids, texts, metas
        offset = 0
        while True:
            got = col.get(include=["documents", "metadatas"], limit=page, offset=offset)
            ids += got["ids"]
            texts += [t or "" for t in got["documents"]]
            metas += [dict(m or {}) for m in got["metadatas"]]
            if len(got["ids"]) < page:
                return ids, texts, metas
            offset += page

    def list_collections(self) -> list[str]:
        return [c.name if hasattr(c, "name") else str(c) for c in self.client.list_collections()]


class Bm25Cache:
    """BM25 corpora of recently used knowledge bases, keyed by the collection's generation token.

    A knowledge base whose generation changed is reloaded from Chroma (another replica wrote it). Writes made by
    this process are applied as deltas instead (:meth:`added`, :meth:`removed`): exact when this process is the
    only writer (the embedded store); with ``exact_deltas=False`` (a shared Chroma server) the entry is dropped.
    """

    def __init__(self, store: ChunkStore, max_entries: int = 16, exact_deltas: bool = True) -> None:
        self.store = store
        self.max_entries = max_entries
        self.exact_deltas = exact_deltas
        self._entries: OrderedDict[str, tuple[str, Bm25Index]] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def get(self, kb_id: str) -> Bm25Index:
        generation = str(self.store.generation(kb_id))  # read before the texts: a later write changes it again
        with self._lock:
            entry = self._entries.get(kb_id)
            if entry and entry[0] == generation:
                self._entries.move_to_end(kb_id)
                return entry[1]
            load_lock = self._loading.setdefault(kb_id, threading.Lock())
        with load_lock:  # one load per knowledge base at a time
            with self._lock:
                entry = self._entries.get(kb_id)
                if entry and entry[0] == generation:
                    return entry[1]
            index = Bm25Index(*self.store.all_chunks(kb_id))
            self._put(kb_id, generation, index)
            return index

    def _put(self, kb_id: str, generation: str, index: Bm25Index) -> None:
        with self._lock:
            self._entries[kb_id] = (generation, index)
            self._entries.move_to_end(kb_id)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def _delta(self, kb_id: str, change: tuple[str | None, str] | None, apply: Any) -> None:
        with self._lock:
            entry = self._entries.pop(kb_id, None)
        if entry is None or change is None or not self.exact_deltas or entry[0] != str(change[0]):
            return  # unknown state: the next query reloads from Chroma
        apply(entry[1])
        self._put(kb_id, change[1], entry[1])

    def added(self, kb_id: str, change: tuple[str | None, str] | None, ids: list[str], texts: list[str],
              metadatas: list[dict[str, Any]]) -> None:
        self._delta(kb_id, change, lambda index: index.add(ids, texts, metadatas))

    def removed(self, kb_id: str, change: tuple[str | None, str] | None, document_id: str) -> None:
        self._delta(kb_id, change, lambda index: index.remove_document(document_id))

    def drop(self, kb_id: str) -> None:
        with self._lock:
            self._entries.pop(kb_id, None)

"""BM25 over one knowledge base, kept up to date by segments and saved to disk (the cache of these indexes:
``engines/search/bm25_cache.py``).

A knowledge base grows by whole documents. Each :meth:`Bm25Index.add` becomes a new immutable *segment*: a
sparse term-frequency matrix plus its chunks' ids, texts and metadata, as the inverted index of Lucene does it.
Removing a document only marks its rows dead. Scores are computed at query time from the postings of the query's
terms (Lucene BM25, as ``bm25s`` computes it: the unit tests compare with bm25s), so no write ever makes a query
rebuild anything: a query right after an upload costs what any other does. Segments merge in the write path when
they pile up, dropping dead rows.

:meth:`Bm25Index.save` writes one ``.npz`` of plain arrays (no pickle) and :meth:`Bm25Index.load` maps it back
without decoding or tokenizing anything: texts and metadata stay UTF-8 bytes until a hit returns them. So the
first query after a restart reads a file instead of fetching and tokenizing every chunk from the vector store
(seconds at 100k chunks).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from engines.search.lexical import tokenize

log = logging.getLogger(__name__)

K1, B = 1.5, 0.75  # Lucene's (and bm25s's) defaults
SNAPSHOT_FORMAT = 1  # bump when the tokenizer or the layout changes: older snapshots are then ignored
MAX_SEGMENTS = 8  # more than this after a write: the small segments are merged


class _Strings:
    """Immutable UTF-8 strings in one buffer with end offsets: saved and loaded as two arrays, decoded one by one."""

    def __init__(self, blob: np.ndarray, ends: np.ndarray) -> None:
        self.blob, self.ends = blob, ends

    @classmethod
    def of(cls, values: Iterable[str]) -> _Strings:
        encoded = [v.encode("utf-8", "surrogatepass") for v in values]
        ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), ends)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> str:
        start = int(self.ends[i - 1]) if i else 0
        return self.blob[start : int(self.ends[i])].tobytes().decode("utf-8", "surrogatepass")

    def at(self, rows: Iterable[int]) -> list[str]:
        """The strings at ``rows``, decoded from one copy of the buffer (a loop of ``[]`` copies it per string)."""
        data, ends = self.blob.tobytes(), self.ends.tolist()
        return [data[(ends[i - 1] if i else 0) : ends[i]].decode("utf-8", "surrogatepass") for i in rows]


class _Segment:
    """Chunks added together: term frequencies (rows x terms known then), lengths, ids, texts, metadata."""

    def __init__(
        self,
        tf: sparse.csc_matrix,
        lengths: np.ndarray,
        ids: _Strings,
        texts: _Strings,
        metas: _Strings,
        languages: np.ndarray,
        documents: np.ndarray,
        alive: np.ndarray | None = None,
    ) -> None:
        self.tf, self.lengths, self.ids, self.texts, self.metas = tf, lengths, ids, texts, metas
        self.languages, self.documents = languages, documents  # per row, for the filter and for removals
        self.alive = np.ones(len(lengths), dtype=bool) if alive is None else alive
        self._not_in: dict[str, np.ndarray] = {}  # language -> rows in another language (a query filter)

    def __len__(self) -> int:
        return len(self.lengths)

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows (alive only) holding ``term`` and its frequency there."""
        if term >= self.tf.shape[1]:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        lo, hi = self.tf.indptr[term], self.tf.indptr[term + 1]
        rows, freqs = self.tf.indices[lo:hi], self.tf.data[lo:hi]
        keep = self.alive[rows]
        return rows[keep], freqs[keep]

    def not_in(self, language: str) -> np.ndarray:
        mask = self._not_in.get(language)
        if mask is None:
            mask = self._not_in[language] = self.languages != language
        return mask

    def widened(self, width: int) -> sparse.csc_matrix:
        """The tf matrix with columns for terms learnt after it was built (empty ones)."""
        tf = self.tf
        if tf.shape[1] == width:
            return tf
        indptr = np.concatenate([tf.indptr, np.full(width - tf.shape[1], tf.indptr[-1], dtype=tf.indptr.dtype)])
        return sparse.csc_matrix((tf.data, tf.indices, indptr), shape=(tf.shape[0], width))


def _tf_matrix(token_lists: Sequence[Sequence[int]], width: int) -> tuple[sparse.csc_matrix, np.ndarray]:
    """Term-frequency matrix (documents x ``width`` terms) and document lengths, vectorised."""
    n = len(token_lists)
    lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int32, count=n)
    flat = np.fromiter((t for tokens in token_lists for t in tokens), dtype=np.int64, count=int(lengths.sum()))
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keys, counts = np.unique(rows * max(width, 1) + flat, return_counts=True)
    matrix = sparse.csc_matrix(
        (counts.astype(np.float32), (keys // max(width, 1), keys % max(width, 1))), shape=(n, width)
    )
    return matrix, lengths


class Bm25Index:
    """BM25 over one knowledge base's chunks (see the module's docstring). Thread-safe."""

    def __init__(
        self, ids: Sequence[str] = (), texts: Sequence[str] = (), metadatas: Sequence[dict[str, Any]] = ()
    ) -> None:
        self.vocab: dict[str, int] = {}
        self._segments: list[_Segment] = []
        self._where: dict[str, tuple[_Segment, int]] | None = {}  # chunk id -> its live row; built lazily on load
        self._alive = 0
        self._alive_length = 0
        self._lock = threading.Lock()
        self.add(ids, texts, metadatas)

    def __len__(self) -> int:
        return self._alive

    # --- writes -------------------------------------------------------------------------------------------------
    def add(self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """Index chunks (a re-added id replaces its earlier version)."""
        if not ids:
            return
        with self._lock:
            where = self._locations()
            for chunk_id in ids:
                if chunk_id in where:
                    self._kill(*where.pop(chunk_id))
            token_lists = [[self.vocab.setdefault(t, len(self.vocab)) for t in tokenize(text)] for text in texts]
            tf, lengths = _tf_matrix(token_lists, len(self.vocab))
            segment = _Segment(
                tf,
                lengths,
                _Strings.of(ids),
                _Strings.of(texts),
                _Strings.of(json.dumps(m, ensure_ascii=False) for m in metadatas),
                np.array([str(m.get("language") or "") for m in metadatas], dtype=object),
                np.array([str(m.get("document_id") or "") for m in metadatas], dtype=object),
            )
            self._segments.append(segment)
            for row, chunk_id in enumerate(ids):
                where[chunk_id] = (segment, row)
            self._alive += len(ids)
            self._alive_length += int(lengths.sum())
            if len(self._segments) > MAX_SEGMENTS:
                self._merge_small()

    def remove_document(self, document_id: str) -> None:
        with self._lock:
            where = self._locations()
            for segment in self._segments:
                for row in np.flatnonzero((segment.documents == document_id) & segment.alive):
                    where.pop(segment.ids[int(row)], None)
                    self._kill(segment, int(row))
            if self._segments and self._alive < sum(len(s) for s in self._segments) // 2:
                self._merge(list(self._segments))  # mostly dead rows: give the memory back

    def _kill(self, segment: _Segment, row: int) -> None:  # caller holds the lock
        if segment.alive[row]:
            segment.alive[row] = False
            self._alive -= 1
            self._alive_length -= int(segment.lengths[row])

    def _locations(self) -> dict[str, tuple[_Segment, int]]:  # caller holds the lock
        if self._where is None:  # after a load: built on first use
            self._where = {}
            for segment in self._segments:
                rows = np.flatnonzero(segment.alive).tolist()
                self._where.update(zip(segment.ids.at(rows), ((segment, row) for row in rows)))
        return self._where

    def _merge_small(self) -> None:
        """Merge every segment but the largest, or all when the small ones together outgrow it (tiered, so a
        write rarely copies the whole index)."""
        largest = max(self._segments, key=len)
        small = [s for s in self._segments if s is not largest]
        self._merge(small if sum(len(s) for s in small) < len(largest) else list(self._segments))

    def _merge(self, group: list[_Segment]) -> None:  # caller holds the lock
        width = len(self.vocab)
        keep = [np.flatnonzero(s.alive) for s in group]
        tf = sparse.vstack([s.widened(width)[rows] for s, rows in zip(group, keep)], format="csc")
        tf.sort_indices()
        merged = _Segment(
            tf.astype(np.float32),
            np.concatenate([s.lengths[rows] for s, rows in zip(group, keep)]).astype(np.int32),
            _Strings.of(s.ids[int(r)] for s, rows in zip(group, keep) for r in rows),
            _Strings.of(s.texts[int(r)] for s, rows in zip(group, keep) for r in rows),
            _Strings.of(s.metas[int(r)] for s, rows in zip(group, keep) for r in rows),
            np.concatenate([s.languages[rows] for s, rows in zip(group, keep)]),
            np.concatenate([s.documents[rows] for s, rows in zip(group, keep)]),
        )
        position = self._segments.index(group[0])
        self._segments = [s for s in self._segments if not any(s is g for g in group)]
        self._segments.insert(position, merged)
        self._where = None  # rows moved; rebuilt at the next write

    # --- reads --------------------------------------------------------------------------------------------------
    def search(self, query: str, k: int, language: str | None = None) -> list[tuple[str, float]]:
        """Top ``k`` (id, score) with a positive score; ``language`` keeps only chunks in that language."""
        return [(chunk_id, score) for chunk_id, score, _, _ in self.search_chunks(query, k, language)]

    def search_chunks(
        self, query: str, k: int, language: str | None = None
    ) -> list[tuple[str, float, str, dict[str, Any]]]:
        """Like :meth:`search`, with each chunk's text and metadata."""
        with self._lock:
            terms = [self.vocab[t] for t in tokenize(query) if t in self.vocab]
            if not self._alive or not terms or k <= 0:
                return []
            postings = [[segment.postings(term) for term in terms] for segment in self._segments]
            df = np.array([sum(len(p[j][0]) for p in postings) for j in range(len(terms))], dtype=np.float64)
            idf = np.log1p((self._alive - df + 0.5) / (df + 0.5))
            average = self._alive_length / self._alive if self._alive_length else 1.0
            best: list[tuple[float, int, int]] = []  # (-score, segment index, row)
            for s, (segment, per_term) in enumerate(zip(self._segments, postings)):
                rows = np.concatenate([r for r, _ in per_term])
                if not len(rows):
                    continue
                freqs = np.concatenate([f for _, f in per_term]).astype(np.float64)
                weights = np.repeat(idf, [len(r) for r, _ in per_term])
                norm = K1 * ((1 - B) + B * segment.lengths[rows] / average)
                scores = np.bincount(rows, weights=weights * freqs / (norm + freqs), minlength=len(segment))
                if language is not None:
                    scores[segment.not_in(language)] = 0.0
                top = np.flatnonzero(scores > 0)
                if len(top) > k:
                    top = top[np.argpartition(-scores[top], k - 1)[:k]]
                best.extend((-float(scores[row]), s, int(row)) for row in top)
            best.sort()
            return [
                (
                    self._segments[s].ids[row],
                    -score,
                    self._segments[s].texts[row],
                    json.loads(self._segments[s].metas[row]),
                )
                for score, s, row in best[:k]
            ]

    def chunks(self, ids: Sequence[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """Text and metadata of those ``ids`` that are in the index (alive): the vector side of a hybrid query
        reads its candidates here instead of fetching them from the vector store."""
        with self._lock:
            where = self._locations()
            found = {}
            for chunk_id in ids:
                place = where.get(chunk_id)
                if place is not None:
                    segment, row = place
                    found[chunk_id] = (segment.texts[row], json.loads(segment.metas[row]))
            return found

    def prepare_lookups(self) -> None:
        """Build the chunk-id map now, not in the first hybrid query after a load (which looks its vector
        candidates up there: docs/performance.md, figures behind the code)."""
        with self._lock:
            self._locations()

    def chunk_ids(self) -> set[str]:
        with self._lock:
            return {i for s in self._segments for i in s.ids.at(np.flatnonzero(s.alive).tolist())}

    # --- on disk ------------------------------------------------------------------------------------------------
    def save(self, path: Path, generation: str) -> None:
        """Write the index to ``path`` atomically (a reader sees the old file or the new one). Only the references
        are taken under the lock: segments are immutable but for their alive flags, which are copied."""
        with self._lock:
            segments = [(s, s.alive.copy()) for s in self._segments]
            vocab = sorted(self.vocab, key=self.vocab.__getitem__)
        arrays: dict[str, np.ndarray] = {
            "format": np.array(SNAPSHOT_FORMAT),
            "generation": _bytes(generation),
            "vocab": _bytes("\n".join(vocab)),  # tokens are \w+ runs: never a newline
            "segments": np.array(len(segments)),
        }
        for n, (seg, alive) in enumerate(segments):
            tf = seg.tf
            arrays.update(
                {
                    f"{n}.tf_data": tf.data,
                    f"{n}.tf_indices": tf.indices,
                    f"{n}.tf_indptr": tf.indptr,
                    f"{n}.tf_shape": np.array(tf.shape),
                    f"{n}.lengths": seg.lengths,
                    f"{n}.alive": alive,
                }
            )
            for name in ("ids", "texts", "metas"):
                strings: _Strings = getattr(seg, name)
                arrays[f"{n}.{name}_blob"], arrays[f"{n}.{name}_ends"] = strings.blob, strings.ends
            for name in ("languages", "documents"):  # few distinct values: saved as codes
                values, codes = np.unique(getattr(seg, name).astype(str), return_inverse=True)
                arrays[f"{n}.{name}_values"] = _bytes(json.dumps(values.tolist()))
                arrays[f"{n}.{name}_codes"] = codes.astype(np.int32)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                np.savez(out, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: Path, generation: str) -> Bm25Index | None:
        """The index saved at ``path`` if it is of this ``generation`` and format, else None."""
        try:
            with np.load(path, allow_pickle=False) as saved:
                if int(saved["format"]) != SNAPSHOT_FORMAT or _text(saved["generation"]) != generation:
                    return None
                index = cls()
                vocab = _text(saved["vocab"]).split("\n") if saved["vocab"].size else []
                index.vocab = dict(zip(vocab, range(len(vocab))))
                for n in range(int(saved["segments"])):
                    categories = {
                        name: np.array(json.loads(_text(saved[f"{n}.{name}_values"])), dtype=object)[
                            saved[f"{n}.{name}_codes"]
                        ]
                        for name in ("languages", "documents")
                    }
                    strings = {
                        name: _Strings(saved[f"{n}.{name}_blob"], saved[f"{n}.{name}_ends"])
                        for name in ("ids", "texts", "metas")
                    }
                    segment = _Segment(
                        sparse.csc_matrix(
                            (saved[f"{n}.tf_data"], saved[f"{n}.tf_indices"], saved[f"{n}.tf_indptr"]),
                            shape=tuple(int(x) for x in saved[f"{n}.tf_shape"]),
                        ),
                        saved[f"{n}.lengths"],
                        strings["ids"],
                        strings["texts"],
                        strings["metas"],
                        categories["languages"],
                        categories["documents"],
                        saved[f"{n}.alive"].copy(),
                    )
                    index._segments.append(segment)
                    index._alive += int(segment.alive.sum())
                    index._alive_length += int(segment.lengths[segment.alive].sum())
                index._where = None
                return index
        except FileNotFoundError:
            return None
        except Exception:  # a damaged or foreign file: rebuild from the store instead
            log.warning("ignoring the unreadable BM25 snapshot %s", path, exc_info=True)
            return None


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _text(array: np.ndarray) -> str:
    return array.tobytes().decode("utf-8")

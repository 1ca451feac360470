"""The BM25 indexes of recently used knowledge bases (:class:`Bm25Cache`), kept current with the vector store
(a collection's generation token changes on every write) and saved to disk as snapshots in the background.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from engines.search.bm25 import Bm25Index

log = logging.getLogger(__name__)

USE_STAMP_INTERVAL_S = 60.0  # how often a knowledge base in use has its snapshot's modification time renewed
SAVE_REST_FACTOR = 20.0  # after a background save of t seconds, the next waits at least 20 t


def _is_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


class ChunkSource(Protocol):
    """What the cache reads from the vector store (``engines.search.chunk_store.ChunkStore``)."""

    def generation(self, kb_id: str) -> str | None: ...

    def all_chunks(self, kb_id: str) -> tuple[list[str], list[str], list[dict[str, Any]]]: ...


Generation = tuple[str | None, str]  # a write's (previous, new) generation token of a collection


class Bm25Cache:
    """BM25 indexes of recently used knowledge bases, keyed by the collection's generation token.

    A knowledge base whose generation changed is reloaded (another replica wrote it): from its snapshot in
    ``snapshot_dir`` when that is of the current generation, else from the store. Writes made by this process are
    applied as deltas instead (:meth:`added`, :meth:`removed`): exact when this process is the only writer (the
    embedded store), where a write to a knowledge base not in memory loads it then, so the next query finds it
    ready; with ``exact_deltas=False`` (a shared Chroma server) the entry is dropped. Changed indexes are
    saved by a background thread ``save_delay_s`` after the last change, and by :meth:`close`.
    """

    def __init__(
        self,
        store: ChunkSource,
        max_entries: int = 16,
        exact_deltas: bool = True,
        snapshot_dir: Path | None = None,
        save_delay_s: float = 2.0,
    ) -> None:
        self.store = store
        self.max_entries = max_entries
        self.exact_deltas = exact_deltas
        self.snapshot_dir = snapshot_dir
        self.save_delay_s = save_delay_s
        self._entries: OrderedDict[str, tuple[str, Bm25Index]] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self._used: dict[str, float] = {}  # kb id -> when its snapshot's time was last renewed (monotonic)
        self._dirty: dict[str, float] = {}  # kb id -> when it last changed
        self._wake = threading.Condition(self._lock)
        self._saver: threading.Thread | None = None
        self._saving = threading.Lock()  # held while files are written: drop() waits, then deletes
        self._rest_until = 0.0  # no background save before this (monotonic time)
        self._closed = False

    def snapshot_path(self, kb_id: str) -> Path | None:
        return None if self.snapshot_dir is None else self.snapshot_dir / f"{kb_id}.npz"

    def by_recent_use(self) -> list[str]:
        """The knowledge bases with a snapshot on disk, the most recently used first (to the minute: a query or a
        write renews its snapshot's time; a clean stop stamps the indexes in memory in their exact order of use)."""
        if self.snapshot_dir is None:
            return []
        saved = []
        for path in self.snapshot_dir.glob("*.npz"):
            if not _is_uuid(path.stem):  # not a snapshot of ours
                continue
            with contextlib.suppress(OSError):  # removed meanwhile
                saved.append((path.stat().st_mtime_ns, path.stem))
        return [kb_id for _, kb_id in sorted(saved, reverse=True)]

    def get(self, kb_id: str, generation: str | None = None) -> Bm25Index:
        """The knowledge base's index of its collection's generation: the token the caller read already
        (``generation``, from :meth:`ChunkStore.open`), else the one read here."""
        index = self._obtain(kb_id, rebuild=True, generation=generation)
        assert index is not None
        self._note_use(kb_id)
        return index

    def _note_use(self, kb_id: str) -> None:
        """Renew the snapshot's modification time, at most every ``USE_STAMP_INTERVAL_S``: ``by_recent_use``
        then follows use also after a stop that never ran :meth:`close`."""
        path = self.snapshot_path(kb_id)
        if path is None:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._used.get(kb_id, float("-inf")) < USE_STAMP_INTERVAL_S:
                return
            self._used[kb_id] = now
        with contextlib.suppress(OSError):  # not saved yet
            os.utime(path)

    def load_saved(self, kb_id: str) -> Bm25Index | None:
        """The index read from its snapshot and kept in memory, or None where the snapshot is missing or not of
        the collection's current generation (a warm-up leaves rebuilding from the store to the first query)."""
        return self._obtain(kb_id, rebuild=False)

    def _obtain(self, kb_id: str, rebuild: bool, generation: str | None = None) -> Bm25Index | None:
        if generation is None:  # read before the texts: a later write changes it again
            generation = str(self.store.generation(kb_id))
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
            path = self.snapshot_path(kb_id)
            index = Bm25Index.load(path, generation) if path is not None else None
            if index is None:
                if not rebuild:
                    return None
                index = Bm25Index(*self.store.all_chunks(kb_id))
                self._put(kb_id, generation, index, changed=len(index) > 0)  # worth a snapshot
            elif not rebuild and str(self.store.generation(kb_id)) != generation:
                return None  # written or deleted while it was read: not worth keeping ahead of a query
            else:
                self._put(kb_id, generation, index, changed=False)
            return index

    def _put(self, kb_id: str, generation: str, index: Bm25Index, changed: bool) -> None:
        with self._lock:
            self._entries[kb_id] = (generation, index)
            self._entries.move_to_end(kb_id)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            if changed and self.snapshot_dir is not None and not self._closed:
                self._dirty[kb_id] = time.monotonic()
                if self._saver is None:
                    self._saver = threading.Thread(target=self._save_loop, name="bm25-snapshots", daemon=True)
                    self._saver.start()
                self._wake.notify_all()

    def _delta(self, kb_id: str, change: Generation | None, apply: Callable[[Bm25Index], None]) -> None:
        with self._lock:
            entry = self._entries.pop(kb_id, None)
        if entry is None and change is not None and self.exact_deltas:
            self.get(kb_id)  # not in memory: load it now (the write is in it), not at the next query
            return
        if entry is None or change is None or not self.exact_deltas or entry[0] != str(change[0]):
            return  # unknown state: the next query reloads (its snapshot no longer matches the generation)
        apply(entry[1])  # the content first, then its generation: a snapshot never pairs old text with a new token
        self._put(kb_id, change[1], entry[1], changed=True)

    def added(
        self, kb_id: str, change: Generation | None, ids: list[str], texts: list[str], metadatas: list[dict[str, Any]]
    ) -> None:
        self._delta(kb_id, change, lambda index: index.add(ids, texts, metadatas))

    def removed(self, kb_id: str, change: Generation | None, document_id: str) -> None:
        self._delta(kb_id, change, lambda index: index.remove_document(document_id))

    def drop(self, kb_id: str) -> None:
        with self._lock:
            self._entries.pop(kb_id, None)
            self._dirty.pop(kb_id, None)
            self._used.pop(kb_id, None)
        path = self.snapshot_path(kb_id)
        if path is not None:
            with self._saving, contextlib.suppress(FileNotFoundError):
                path.unlink()

    # --- snapshots ----------------------------------------------------------------------------------------------
    def _stamp_order_of_use(self) -> None:
        """Give the snapshots of the indexes in memory modification times in their order of use (the least
        recently used oldest), so that the next start warms the ones used last (``by_recent_use``)."""
        with self._lock:
            order = list(self._entries)  # least recently used first
        now = time.time_ns()
        for n, kb_id in enumerate(order):
            path = self.snapshot_path(kb_id)
            assert path is not None
            stamp = now + n * 1_000_000  # a millisecond apart: coarse file-system clocks keep the order
            with contextlib.suppress(OSError):  # an empty index has no snapshot
                os.utime(path, ns=(stamp, stamp))

    def _save_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._due():
                    waits = [changed + self.save_delay_s - time.monotonic() for changed in self._dirty.values()]
                    waits = [max(w, self._rest_until - time.monotonic()) for w in waits]
                    self._wake.wait(timeout=max(0.05, min(waits)) if waits else None)
                if self._closed:
                    return
            self.save_due()

    def _due(self) -> bool:  # caller holds the lock
        now = time.monotonic()
        return now >= self._rest_until and any(now - c >= self.save_delay_s for c in self._dirty.values())

    def save_due(self, force: bool = False) -> None:
        """Save every changed index whose last change is ``save_delay_s`` old (all of them with ``force``)."""
        with self._saving:
            with self._lock:
                now = time.monotonic()
                due = [kb for kb, changed in self._dirty.items() if force or now - changed >= self.save_delay_s]
                work = [(kb, *self._entries[kb]) for kb in due if kb in self._entries]
                for kb in due:
                    del self._dirty[kb]
            started = time.monotonic()
            for kb_id, generation, index in work:
                path = self.snapshot_path(kb_id)
                assert path is not None
                try:
                    index.save(path, generation)
                except OSError:
                    log.warning("could not save the BM25 snapshot of knowledge base %s", kb_id, exc_info=True)
            # a bulk ingest changes a large index every few seconds: spend at most ~5% of the time saving it
            self._rest_until = time.monotonic() + SAVE_REST_FACTOR * (time.monotonic() - started)

    def close(self) -> None:
        """Save what changed, stamp the snapshots in their order of use, and stop the saver thread."""
        if self.snapshot_dir is not None:
            self.save_due(force=True)
            self._stamp_order_of_use()
        with self._lock:
            self._closed = True
            self._wake.notify_all()

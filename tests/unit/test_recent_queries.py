"""The Search replica's recent query vectors (``deployments.embeddings.RecentQueries``): a question embedded twice
within the time-to-live by the same model goes to the model once; later, once pushed out, or after the model was
swapped, it is embedded again."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from deployments.embeddings import RecentQueries


class CountingSource:
    """An embedder that counts its calls and gives each text a vector of its own."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str]] = []

    async def embed(self, texts: list[str], kind: str) -> np.ndarray:
        self.calls.append((list(texts), kind))
        return np.array([[float(len(t)), float(len(self.calls))] for t in texts], dtype=np.float32)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_question_asked_again_within_the_ttl_is_embedded_once() -> None:
    source, clock = CountingSource(), Clock()
    queries = RecentQueries(source, size=4, ttl_s=30.0, clock=clock)
    first = asyncio.run(queries.vector("Who runs the clinic?"))
    clock.now = 29.0
    again = asyncio.run(queries.vector("Who runs the clinic?"))
    assert source.calls == [(["Who runs the clinic?"], "query")]
    assert again is first
    with pytest.raises(ValueError):  # shared by its callers: never changed in place
        again[0] = 1.0


def test_after_the_ttl_or_once_pushed_out_it_is_embedded_again() -> None:
    source, clock = CountingSource(), Clock()
    queries = RecentQueries(source, size=2, ttl_s=30.0, clock=clock)
    asyncio.run(queries.vector("a"))
    clock.now = 31.0
    asyncio.run(queries.vector("a"))  # stale: embedded again
    asyncio.run(queries.vector("bb"))
    asyncio.run(queries.vector("a"))  # fresh and recently used: kept
    asyncio.run(queries.vector("ccc"))  # pushes out the least recently used, "bb"
    asyncio.run(queries.vector("bb"))
    assert [texts for texts, _ in source.calls] == [["a"], ["a"], ["bb"], ["ccc"], ["bb"]]
    assert {kind for _, kind in source.calls} == {"query"}


class SwappableSource(CountingSource):
    """An in-process embedder whose model can be swapped (``LocalEmbeddings.load`` replaces ``engine``)."""

    def __init__(self) -> None:
        super().__init__()
        self.engine = object()


def test_a_vector_of_a_swapped_out_model_is_never_reused() -> None:
    source, clock = SwappableSource(), Clock()
    queries = RecentQueries(source, size=4, ttl_s=30.0, clock=clock)
    asyncio.run(queries.vector("Who runs the clinic?"))
    source.engine = object()  # another model loaded
    asyncio.run(queries.vector("Who runs the clinic?"))
    asyncio.run(queries.vector("Who runs the clinic?"))  # the new model's vector is reused again
    assert len(source.calls) == 2

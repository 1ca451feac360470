"""Retrieval engines and the Search deployment without HTTP: languages, BM25, fusion, Chroma, ownership."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contracts.errors import InvalidInput, NotFound
from contracts.payloads import Blob
from contracts.search import AddDocument, DocumentFile, SearchQuery
from contracts.settings import Settings
from engines.search.bm25 import Bm25Index
from engines.search.bm25_cache import Bm25Cache
from engines.search.chunk_language import detect_languages
from engines.search.chunk_store import ChunkStore, collection_name, connect_chroma
from engines.search.fusion import FusionConfig, Hit, fuse
from engines.search.lexical import tokenize
from serve_app.services.search import query_language

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


@pytest.mark.parametrize(
    "value,code",
    [
        ("zu_ZA", "zul"),
        ("zu-ZA", "zul"),
        ("zu", "zul"),
        ("zul", "zul"),
        ("zul_Latn", "zul"),
        ("isiZulu", "zul"),
        ("en_ZA", "eng"),
        ("eng_Latn", "eng"),
        ("af", "afr"),
        ("afr_Latn", "afr"),
        ("st_ZA", "sot"),
        ("sot_Latn", "sot"),
        ("nso_Latn", "nso"),
        ("Sepedi", "nso"),
        ("tn", "tsn"),
        ("ss_ZA", "ssw"),
        ("ts", "tso"),
        ("xh_ZA", "xho"),
        ("sw", "swh"),
        ("swa", "swh"),
        ("sna_Latn", "sna"),
        ("fr_FR", "fra"),
        ("ven", "ven"),
        ("nr", "nbl"),
        ("cs-zul", "zul"),
        (None, None),
        ("", None),
        ("  ", None),
    ],
)
def test_language_spellings(value: str | None, code: str | None) -> None:
    assert query_language(value) == code


@pytest.mark.parametrize("value", ["xx_YY", "klingon", "de", "zz"])
def test_unknown_language_names_what_is_accepted(value: str) -> None:
    with pytest.raises(InvalidInput, match=r"unknown language .* ISO 639-3"):
        query_language(value)


def test_chunk_language_detection() -> None:
    texts = [
        "The clinic is open from Monday to Friday and closes at four in the afternoon.",
        "Umtholampilo uvulwa ngoMsombuluko kuya ngoLwesihlanu, uvalwa ngo-4 ntambama.",
        "Die kliniek is oop van Maandag tot Vrydag en sluit om vieruur in die middag.",
        "Tliliniki e bulwa ho tloha ka Mantaha ho isa ka Labohlano, e kwalwa ka hora ya bone.",
    ]
    assert detect_languages(texts) == ["eng", "zul", "afr", "sot"]


def test_tokenizer_keeps_numbers_names_and_drops_function_words() -> None:
    assert tokenize("The grant is R2,190 per month.") == ["grant", "r2", "190", "per", "month"]
    assert tokenize("Ward 23 on 4,000 sites") == ["ward", "23", "4000", "sites"]
    assert tokenize("Amanzi azonqamuka nini eThekwini kuMandela?") == [
        "amanzi",
        "azonqamuka",
        "ethekwini",
        "kumandela",
        "thekwini",
        "mandela",
    ]
    assert tokenize("Wie is die bestuurder?") == ["bestuurder"]


def test_bm25_ranks_exact_names_and_filters_language() -> None:
    ids = ["a", "b", "c"]
    texts = [
        "Water notice for Ward 5 in Pinetown.",
        "Water notice for Ward 9 in Westville.",
        "Amanzi azonqamuka eWadini 9 eWestville.",
    ]
    metas = [{"language": "eng"}, {"language": "eng"}, {"language": "zul"}]
    index = Bm25Index(ids, texts, metas)
    ranked = [i for i, _ in index.search("Westville water", 3)]
    assert ranked[0] == "b" and "c" in ranked  # "eWestville" is indexed as "westville" too
    assert index.search("Pinetown", 3)[0][0] == "a"
    assert [i for i, _ in index.search("Westville", 3, language="zul")] == ["c"]
    assert index.search("unrelated words entirely", 3) == []
    assert index.search("the is", 3) == []  # nothing but function words
    assert Bm25Index([], [], []).search("anything", 3) == []


def test_segmented_bm25_scores_like_stock_bm25s() -> None:
    """Three segments (three adds) and query-time scoring give bm25s's Lucene BM25 scores over the whole corpus."""
    import bm25s
    from bm25s.tokenization import Tokenized

    passages, _ = __import__("eval_retrieval").load_set()
    vocab: dict[str, int] = {}
    token_ids = [[vocab.setdefault(t, len(vocab)) for t in tokenize(p["text"])] for p in passages]
    stock = bm25s.BM25()
    stock.index(Tokenized(ids=token_ids, vocab=dict(vocab)), create_empty_token=False, show_progress=False)
    ids = [f"p{i}" for i in range(len(passages))]
    index = Bm25Index()
    for part in np.array_split(np.arange(len(passages)), 3):
        index.add([ids[i] for i in part], [passages[i]["text"] for i in part], [{} for _ in part])
    assert len(index._segments) == 3
    for query in ("Ward 23 water Chatsworth", "umtholampilo uvulwa", "tliliniki Botshabelo 07:00", "R530 R530"):
        want = stock.get_scores([vocab[t] for t in tokenize(query) if t in vocab])
        got = dict(index.search(query, len(passages)))
        assert got and set(got) == {ids[i] for i in np.flatnonzero(want > 0)}
        assert np.allclose([got[ids[i]] for i in np.flatnonzero(want > 0)], want[want > 0], rtol=1e-5)


def _notices(documents: int, per_document: int) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Chunk texts and metadata by chunk id ("d<document>:<i>"): water notices with distinct ward numbers."""
    texts = {
        f"d{d}:{i}": f"Ward {d * per_document + i} in Umlazi has no water, notice {d} of {i + 1} May."
        for d in range(documents)
        for i in range(per_document)
    }
    return texts, {cid: {"document_id": cid.split(":")[0], "language": "eng"} for cid in texts}


def _grown(texts: dict[str, str], metas: dict[str, dict[str, str]], documents: int) -> Bm25Index:
    """An index grown one document at a time, searched in between."""
    grown = Bm25Index()
    for d in range(documents):
        ids = [c for c in texts if c.startswith(f"d{d}:")]
        grown.add(ids, [texts[c] for c in ids], [metas[c] for c in ids])
        assert grown.search(f"Ward {d}", 1)  # each add is searchable at once
        assert len(grown._segments) <= 9  # merged in the write path, never rebuilt by a query
    return grown


def test_bm25_merges_segments_and_keeps_scores() -> None:
    texts, metas = _notices(20, 3)
    grown = _grown(texts, metas, 20)
    fresh = Bm25Index(list(texts), list(texts.values()), list(metas.values()))
    for query in ("Ward 23", "Umlazi notice 7", "12 May"):
        got, want = grown.search_chunks(query, 10), fresh.search_chunks(query, 10)
        assert [(c, t, m) for c, _, t, m in got] == [(c, t, m) for c, _, t, m in want]
        assert np.allclose([x for _, x, _, _ in got], [x for _, x, _, _ in want])
    grown.add(["d3:0"], ["Ward 999 replaced"], [metas["d3:0"]])  # a re-added id replaces its old text
    assert [c for c, _ in grown.search("999 replaced", 5)] == ["d3:0"]
    every = [(c, t) for c, _, t, _ in grown.search_chunks("Ward", 100)]  # its old text is gone
    assert [t for c, t in every if c == "d3:0"] == ["Ward 999 replaced"] and len(every) == len(grown) == len(texts)


def test_bm25_snapshot_round_trip_by_generation(tmp_path: Path) -> None:
    texts = [f"Clinic {i} in Ward {i % 9} opens at 0{i % 3 + 7}:00. Umtholampilo uvulwa ekuseni." for i in range(40)]
    metas = [{"document_id": f"d{i // 10}", "language": "zul" if i % 2 else "eng", "n": i} for i in range(40)]
    index = Bm25Index([f"c{i}" for i in range(40)], texts, metas)
    index.add(["x"], ["Ward 77 ngoLwesithathu"], [{"document_id": "dx", "language": "zul"}])
    index.remove_document("d1")
    path = tmp_path / "kb.npz"
    index.save(path, "gen-1")
    assert Bm25Index.load(path, "gen-2") is None  # another generation: the store has changed since
    loaded = Bm25Index.load(path, "gen-1")
    assert loaded is not None and len(loaded) == len(index) == 31
    for query, language in (("Clinic Ward 3", None), ("umtholampilo", "zul"), ("Ward 77", None), ("Clinic 12", None)):
        assert loaded.search_chunks(query, 8, language) == index.search_chunks(query, 8, language)
    assert not any(c.startswith("c1") and len(c) == 3 for c, _ in loaded.search("Clinic", 40))  # d1 stays removed
    loaded.add(["y"], ["Ward 78 ngoLwesine"], [{"document_id": "dy"}])  # a loaded index takes writes
    loaded.remove_document("d2")
    assert loaded.search("Ward 78", 1)[0][0] == "y" and len(loaded) == 22
    path.write_bytes(path.read_bytes()[:100])  # a damaged file is ignored, not trusted
    assert Bm25Index.load(path, "gen-1") is None


def test_bm25_cache_reads_its_snapshot_after_a_restart_not_the_store(tmp_path: Path) -> None:
    store = ChunkStore(connect_chroma(path=str(tmp_path / "chroma")))
    kb = str(uuid.uuid4())
    rng = np.random.default_rng(0)

    def add(ids: list[str], texts: list[str]) -> tuple[str | None, str]:
        metas = [{"document_id": i.split(":")[0], "language": "eng"} for i in ids]
        return store.add(kb, 1, ids, rng.normal(size=(len(ids), 8)).astype(np.float32), texts, metas)

    add([f"d{i // 5}:{i}" for i in range(30)], [f"Clinic {i} in Ward {i} opens at 08:00." for i in range(30)])
    reads: list[str] = []
    read_store = store.all_chunks
    store.all_chunks = lambda kb_id: (reads.append(kb_id), read_store(kb_id))[1]  # type: ignore[method-assign]
    snapshots = tmp_path / "bm25"
    cache = Bm25Cache(store, snapshot_dir=snapshots, save_delay_s=0.0)
    assert cache.get(kb).search("Clinic 7", 1)[0][0] == "d1:7" and reads == [kb]
    change = add(["dx:0"], ["Ward 77 refuse is collected on Wednesdays."])  # our own write: a delta
    cache.added(kb, change, ["dx:0"], ["Ward 77 refuse is collected on Wednesdays."], [{"document_id": "dx"}])
    cache.close()  # saves what changed
    assert Bm25Index.load(snapshots / f"{kb}.npz", str(store.generation(kb))) is not None

    restarted = Bm25Cache(store, snapshot_dir=snapshots, save_delay_s=0.0)
    assert restarted.get(kb).search("Ward 77 refuse", 1)[0][0] == "dx:0"
    assert reads == [kb]  # the snapshot was read, not the store
    add(["dy:0"], ["Ward 88 has no water."])  # written elsewhere: the snapshot is now stale
    assert restarted.get(kb).search("Ward 88 water", 1)[0][0] == "dy:0" and reads == [kb, kb]
    cold = Bm25Cache(store)  # a write to a knowledge base not in memory loads it in the write path...
    change = add(["dz:0"], ["Ward 99 clinic closes early."])
    cold.added(kb, change, ["dz:0"], ["Ward 99 clinic closes early."], [{"document_id": "dz"}])
    assert reads == [kb, kb, kb]
    assert cold.get(kb).search("Ward 99 clinic", 1)[0][0] == "dz:0" and reads == [kb, kb, kb]  # ...not the query
    restarted.drop(kb)
    restarted.close()
    assert not (snapshots / f"{kb}.npz").exists()


def test_bm25_cache_orders_snapshots_by_use(tmp_path: Path) -> None:
    """A query renews its knowledge base's snapshot time (at most once a minute), so the order of use survives a
    stop that never closed the cache; a clean close stamps the indexes in memory in their exact order of use."""
    store = ChunkStore(connect_chroma(path=str(tmp_path / "chroma")))
    kbs = [str(uuid.uuid4()) for _ in range(3)]
    rng = np.random.default_rng(0)
    for n, kb in enumerate(kbs):
        ids = [f"d{n}:{i}" for i in range(3)]
        texts = [f"Clinic {i} in Ward {n} opens at 08:00." for i in range(3)]
        metas = [{"document_id": f"d{n}", "language": "eng"} for _ in ids]
        store.add(kb, 1, ids, rng.normal(size=(3, 8)).astype(np.float32), texts, metas)
    snapshots = tmp_path / "bm25"
    saving = Bm25Cache(store, snapshot_dir=snapshots, save_delay_s=0.0)
    for kb in kbs:
        saving.get(kb)
    saving.close()
    long_ago = time.time() - 3600
    for age, kb in enumerate(kbs):  # kbs[0] newest by file time
        os.utime(snapshots / f"{kb}.npz", (long_ago - age, long_ago - age))
    (snapshots / "not-a-knowledge-base.npz").write_bytes(b"")  # ignored
    assert Bm25Cache(store, snapshot_dir=snapshots).by_recent_use() == kbs

    crashed = Bm25Cache(store, snapshot_dir=snapshots)  # used, then never closed
    crashed.get(kbs[2])
    assert crashed.by_recent_use() == [kbs[2], kbs[0], kbs[1]]
    os.utime(snapshots / f"{kbs[2]}.npz", (long_ago - 9, long_ago - 9))
    crashed.get(kbs[2])  # again within the minute: not renewed
    assert crashed.by_recent_use() == [kbs[0], kbs[1], kbs[2]]

    closing = Bm25Cache(store, snapshot_dir=snapshots)
    for kb in (kbs[1], kbs[2], kbs[0], kbs[1]):
        closing.get(kb)
    closing.close()
    assert closing.by_recent_use() == [kbs[1], kbs[0], kbs[2]]


def test_bm25_corpus_deltas_match_a_fresh_index() -> None:
    texts, metas = _notices(3, 4)
    grown = _grown(texts, metas, 3)
    grown.remove_document("d1")
    kept = [c for c in texts if not c.startswith("d1:")]
    fresh = Bm25Index(kept, [texts[c] for c in kept], [metas[c] for c in kept])
    for query in ("Ward 23 water", "Umlazi 3 May", "Ward 12"):
        got, want = grown.search(query, 5), fresh.search(query, 5)
        assert [c for c, _ in got] == [c for c, _ in want]
        assert np.allclose([x for _, x in got], [x for _, x in want])
    assert not any(c.startswith("d1:") for c, _ in grown.search("Ward 12 Umlazi water", 20))


def test_rrf_fusion_scores_ordering_and_language_boost() -> None:
    def hits(*ids: str, lang: str = "eng") -> list[Hit]:
        return [Hit(i, i, {"language": lang if i != "z" else "zul"}) for i in ids]

    config = FusionConfig(rrf_k=60, language_boost=0.5)
    fused = fuse(hits("a", "b", "c"), hits("b", "d"), config)
    assert [h.id for h in fused] == ["b", "a", "d", "c"]
    assert fused[0].score == pytest.approx((1 / 62 + 1 / 61) / (2 / 61), abs=1e-6)
    assert all(x.score >= y.score for x, y in zip(fused, fused[1:]))
    top = fuse(hits("a"), hits("a"), config)[0]
    assert top.score == pytest.approx(1.0)
    boosted = fuse(hits("a", "z"), [], config, language="zul")
    assert [h.id for h in boosted] == ["z", "a"] and boosted[0].score <= 1.0


def test_chunk_store_add_count_delete_with_explicit_vectors(tmp_path: Path) -> None:
    store = ChunkStore(connect_chroma(path=str(tmp_path / "chroma")))
    kb = str(uuid.uuid4())
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((30, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for doc in ("d1", "d2", "d3"):
        rows = range(int(doc[1]) * 10 - 10, int(doc[1]) * 10)
        store.add(
            kb,
            42,
            [f"{doc}:{i}" for i in rows],
            vectors[list(rows)],
            [f"text {i}" for i in rows],
            [{"document_id": doc, "language": "eng"} for _ in rows],
        )
    assert store.count(kb) == 30 and store.count(kb, "d2") == 10 and store.owner(kb) == 42
    hit = store.vector_search(kb, vectors[13], 3)[0]
    assert hit.id == "d2:13" and hit.similarity == pytest.approx(1.0, abs=1e-4)
    generation = store.generation(kb)
    removed, (previous, new) = store.delete_document(kb, "d2")
    assert removed == 10 and previous == generation and new == store.generation(kb)
    assert store.generation(kb) != generation  # BM25 caches see the change
    assert store.count(kb) == 20 and store.count(kb, "d2") == 0
    assert all(h.metadata["document_id"] != "d2" for h in store.vector_search(kb, vectors[13], 30))
    store.delete_document(kb, "d1")
    store.delete_document(kb, "d3")
    assert store.count(kb) == 0 and store.vector_search(kb, vectors[0], 3) == []  # empty, still there
    col = store.client.get_collection(collection_name(kb))
    assert (col.configuration_json.get("embedding_function") or {}).get("name") != "default"
    assert store.delete_kb(kb) and not store.exists(kb) and collection_name(kb) not in store.list_collections()
    assert store.vector_search(kb, vectors[0], 3) == [] and store.count(kb) == 0 and not store.delete_kb(kb)


def test_a_collection_deleted_after_its_look_up_reads_as_empty(tmp_path: Path) -> None:
    """A knowledge base deleted while a query runs, between its one look-up and its reads, has no chunks left: the
    reads answer none, as a look-up by name would find none, instead of Chroma's error."""
    store = ChunkStore(connect_chroma(path=str(tmp_path / "chroma")))
    kb = str(uuid.uuid4())
    vectors = np.eye(4, 384, dtype=np.float32)
    ids = [f"d1:{i}" for i in range(4)]
    store.add(kb, 42, ids, vectors, [f"text {i}" for i in range(4)], [{"document_id": "d1"} for _ in ids])
    opened = store.open(kb)
    assert opened is not None and opened.owner == 42
    assert [hit.id for hit in opened.vector_search(vectors[1], 1)] == ["d1:1"]
    assert opened.chunks(ids[:1]) == {"d1:0": ("text 0", {"document_id": "d1"})}
    assert store.delete_kb(kb) and store.open(kb) is None
    assert opened.vector_search(vectors[1], 3) == []
    assert opened.chunks(ids[:2]) == {}
    assert opened.filled([Hit("d1:0", "", {})], {}) == []


def _store_settings(tmp_path: Path, **search: object) -> dict:
    """What a Search replica is bound with."""
    settings = Settings(
        data_dir=tmp_path, search={"chroma_path": tmp_path / "chroma", "lock_wait_seconds": 0, **search}, _env_file=None
    )
    return settings.for_replica(("search", "embeddings"))


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory):
    """A handle of the real Embeddings deployment (Serve's local testing mode)."""
    from khuluma.app import build_local

    settings = Settings(data_dir=tmp_path_factory.mktemp("embeddings"), _env_file=None)
    return build_local(settings, ["embeddings"])["embeddings"]


def _document(folder: Path, kb: str, doc_id: str, filename: str, text: str, customer_id: int) -> AddDocument:
    """An upload as the ingress hands it over: saved to disk."""
    path = folder / f"{doc_id}-{filename}"
    path.write_text(text, encoding="utf-8")
    return AddDocument(
        kb_id=kb,
        document_id=doc_id,
        customer_id=customer_id,
        file=DocumentFile(content=Blob(data=path.read_bytes(), size=path.stat().st_size), filename=filename),
    )


def test_knowledge_store_ingest_query_delete_and_owner(tmp_path: Path, embeddings) -> None:
    from deployments.search import Search

    store = Search(_store_settings(tmp_path, chunk_chars=200, chunk_overlap_chars=50), embeddings=embeddings)
    kb = str(uuid.uuid4())
    english = (
        "Soshanguve Block X Clinic is open from Monday to Friday, 07:30 to 19:00. It is closed on weekends. "
        "The facility manager is Dr Pieter Venter.\n\nAntenatal visits are on Tuesdays and Thursdays. "
        "Bring your clinic card."
    )
    zulu = "Udoti uqoqwa eWadini 45 njalo ngoLwesithathu. Beka izikhwama zakho ngaphandle ngaphambi kuka-06:30."

    def ask(text: str, language: str | None = None, top_k: int = 5, **options: object) -> SearchQuery:
        return SearchQuery(kb_id=kb, text=text, language=query_language(language), top_k=top_k, **options)

    async def scenario() -> None:
        info = await store.add_document(_document(tmp_path, kb, "doc-en", "clinic.txt", english, 7))
        assert info.chunks >= 2 and info.language == "eng"
        assert (await store.add_document(_document(tmp_path, kb, "doc-zu", "udoti.txt", zulu, 7))).language == "zul"
        assert store.count(kb) == info.chunks + 1

        results = await store.query(ask("Who is the manager of the Soshanguve clinic?", None, 3, customer_id=7))
        assert results[0].document_id == "doc-en" and "Pieter Venter" in results[0].text
        assert english[results[0].start : results[0].end] == results[0].text
        assert all(a.score >= b.score for a, b in zip(results, results[1:]))
        assert 0 < results[0].score <= 1

        only_zulu = await store.query(ask("clinic", "zu_ZA", 5, customer_id=7, strict_language=True))
        assert [r.document_id for r in only_zulu] == ["doc-zu"]
        lexical = await store.query(ask("Lwesithathu", None, 5, mode="lexical"))
        assert lexical[0].document_id == "doc-zu"

        with pytest.raises(NotFound):  # another customer's knowledge base, even at this level
            await store.query(ask("clinic", None, 3, customer_id=8))
        with pytest.raises(NotFound):
            await store.add_document(_document(tmp_path, kb, "doc-x", "x.txt", "Some text here.", 8))
        with pytest.raises(InvalidInput, match="language"):  # checked once, by the ingress, before the store
            ask("clinic", "xx_YY", 3)

        assert await store.delete_document(kb, "doc-en") == info.chunks
        assert store.count(kb, "doc-en") == 0 and store.count(kb) == 1
        # our own writes were applied to the cached BM25 corpus: it matches the store without a reload
        generation, cached = store.bm25._entries[kb]
        assert generation == store.store.generation(kb)
        assert cached.chunk_ids() == set(store.store.all_chunks(kb)[0])
        after = await store.query(ask("Who is the manager of the Soshanguve clinic?", None, 5))
        assert {r.document_id for r in after} == {"doc-zu"}  # BM25 cache rebuilt, no stale chunks
        assert await store.delete_kb(kb) and not store.exists(kb)
        assert await store.query(ask("anything", None, 3)) == []

    try:
        asyncio.run(scenario())
    finally:
        store.close()


def test_hybrid_query_reads_vector_candidates_from_the_lexical_index(tmp_path: Path) -> None:
    """A hybrid query asks Chroma for ids and distances only and takes the candidates' texts and metadata from the
    BM25 index (which holds every chunk): the same hits as Chroma's own. A chunk the index lacks (a write between
    the two reads) comes from the store; one gone from both is left out."""
    from deployments.search import Search
    from engines.search.fusion import Hit

    store = Search(_store_settings(tmp_path, chunk_chars=120, chunk_overlap_chars=0))
    kb = str(uuid.uuid4())
    text = (
        "Refuse is collected in Ward 12 on Mondays before 07:00.\n\nThe Mamelodi clinic opens at 08:00 on "
        "weekdays.\n\nUgesi uzocishwa eSoweto ngoLwesibili kusukela ngo-09:00.\n\nDie biblioteek in Hatfield "
        "sluit Saterdae om 13:00."
    )
    try:
        asyncio.run(store.add_document(_document(tmp_path, kb, "doc-1", "notices.txt", text, 7)))
        vector = asyncio.run(store.embeddings.embed(["When does the clinic open?"], "query"))[0]
        full = store.store.vector_search(kb, vector, 10)
        bare = store.store.vector_search(kb, vector, 10, with_chunks=False)
        assert [h.id for h in bare] == [h.id for h in full] and len(full) >= 2
        assert all(h.text == "" and h.metadata == {} for h in bare)
        index = store.bm25.get(kb)
        opened = store.store.open(kb)
        assert opened is not None and opened.owner == 7 and opened.generation == store.store.generation(kb)
        filled = opened.filled(bare, index.chunks([h.id for h in bare]))
        assert [(h.id, h.text, h.metadata, h.similarity) for h in filled] == [
            (h.id, h.text, h.metadata, h.similarity) for h in full
        ]
        # the index misses one chunk (as if written after it was read): that one comes from the store
        missing = full[0].id
        index.remove_document("doc-1")
        assert index.chunks([missing]) == {}
        asked = [Hit(missing, "", {}), Hit("doc-1:999", "", {})]
        again = opened.filled(asked, index.chunks([h.id for h in asked]))
        assert [(h.id, h.text, h.metadata) for h in again] == [(missing, full[0].text, full[0].metadata)]
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["hybrid", "vector", "lexical"])
def test_a_query_looks_its_collection_up_once(tmp_path: Path, mode: str) -> None:
    """A query reads its knowledge base's collection from the store once (owner, generation and vectors): each
    look-up by name is a round trip to Chroma. A foreign caller is still refused, and an unknown knowledge base
    answers nothing."""
    from deployments.search import Search

    store = Search(_store_settings(tmp_path, chunk_chars=120, chunk_overlap_chars=0))
    kb = str(uuid.uuid4())
    text = "The Mamelodi clinic opens at 08:00 on weekdays.\n\nRefuse is collected in Ward 12 on Mondays."
    client = store.store.client
    look_ups = 0
    real_get_collection = client.get_collection

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal look_ups
        look_ups += 1
        return real_get_collection(*args, **kwargs)

    def ask(customer_id: int | None, knowledge_base: str = kb) -> SearchQuery:
        return SearchQuery(
            kb_id=knowledge_base, text="When does the clinic open?", top_k=2, mode=mode, customer_id=customer_id
        )

    try:
        asyncio.run(store.add_document(_document(tmp_path, kb, "doc-1", "notices.txt", text, 7)))
        asyncio.run(store.query(ask(7)))  # the BM25 index is loaded: reads of the corpus are not the query's
        client.get_collection = counted
        found = asyncio.run(store.query(ask(7)))
        assert found and "Mamelodi" in found[0].text
        assert look_ups == 1
        with pytest.raises(NotFound):
            asyncio.run(store.query(ask(8)))
        assert look_ups == 2
        assert asyncio.run(store.query(ask(7, str(uuid.uuid4())))) == []
    finally:
        client.get_collection = real_get_collection
        store.close()


def test_a_restarted_store_loads_the_indexes_used_last_before_their_first_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new replica reads the BM25 snapshots (and builds the chunk-id maps) of the ``warm_kbs`` knowledge bases
    used last before it is ready: their first query reads nothing from disk or the store. A stale snapshot is left
    to the first query (no rebuild ahead of it), and with ``warm_kbs: 0`` nothing is loaded."""
    from deployments.search import Search

    kbs = [str(uuid.uuid4()) for _ in range(3)]
    text = "Refuse is collected in Ward 12 on Mondays.\n\nThe Mamelodi clinic opens at 08:00 on weekdays."
    settings = partial(_store_settings, tmp_path, chunk_chars=120, chunk_overlap_chars=0)
    first = Search(settings())
    try:
        for n, kb in enumerate(kbs):
            asyncio.run(first.add_document(_document(tmp_path, kb, f"doc-{n}", "notices.txt", text, 7)))
        # kbs[1] is used last, kbs[2] before it, kbs[0] first
        for kb in (kbs[0], kbs[2], kbs[1]):
            expected = asyncio.run(first.query(SearchQuery(kb_id=kb, text="clinic hours", top_k=2)))
    finally:
        first.close()  # saves the snapshots and stamps them in their order of use

    loads: list[Path] = []
    reads: list[str] = []
    real_load, real_all_chunks = Bm25Index.load, ChunkStore.all_chunks
    monkeypatch.setattr(
        Bm25Index, "load", classmethod(lambda cls, path, gen: (loads.append(path), real_load(path, gen))[1])
    )
    monkeypatch.setattr(
        ChunkStore, "all_chunks", lambda self, kb_id: (reads.append(kb_id), real_all_chunks(self, kb_id))[1]
    )
    restarted = Search(settings(warm_kbs=1))
    try:
        assert not restarted._warming.is_alive()  # ready only once loaded
        assert list(restarted.bm25._entries) == [kbs[1]] and reads == []  # the one used last, from its snapshot
        assert restarted.bm25._entries[kbs[1]][1]._where is not None  # chunk ids mapped ahead of the query
        loads.clear()
        assert asyncio.run(restarted.query(SearchQuery(kb_id=kbs[1], text="clinic hours", top_k=2))) == expected
        assert loads == [] and reads == []
        # a write the index does not see (as from another replica): its snapshot is now stale
        vector = asyncio.run(restarted.embeddings.embed(["Ward 99"], "passage"))
        restarted.store.add(kbs[1], 7, ["dx:0"], vector, ["Ward 99 water"], [{"document_id": "dx", "language": "eng"}])
    finally:
        restarted.close()

    stale_skipped = Search(settings(warm_kbs=1))
    try:  # kbs[1]'s snapshot is stale: not rebuilt ahead of a query; the next used, kbs[2], is loaded instead
        assert list(stale_skipped.bm25._entries) == [kbs[2]] and reads == []
    finally:
        stale_skipped.close()

    cold = Search(settings(warm_kbs=0))
    try:
        assert not cold._warming.is_alive() and dict(cold.bm25._entries) == {}
        assert cold.store.delete_kb(kbs[2])  # deleted elsewhere (a shared Chroma server): its snapshot stays here
    finally:
        cold.close()
    after_delete = Search(settings(warm_kbs=3))
    try:  # kbs[1] stale, kbs[2] gone: only kbs[0] is loaded, and nothing is rebuilt from the store
        assert list(after_delete.bm25._entries) == [kbs[0]] and reads == []
    finally:
        after_delete.close()


def test_failed_ingest_leaves_no_vectors(tmp_path: Path, embeddings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embeddings backend fails half-way through a document: the chunks already stored are removed."""
    from deployments import search as search_deployment
    from deployments.search import Search

    store = Search(_store_settings(tmp_path, chunk_chars=100, chunk_overlap_chars=0), embeddings=embeddings)
    real_embed = store.embeddings.embed
    calls = 0

    async def fails_on_second_batch(texts: list[str], kind: str):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("embedding replica died")
        return await real_embed(texts, kind)  # type: ignore[arg-type]

    monkeypatch.setattr(store.embeddings, "embed", fails_on_second_batch)
    kb = str(uuid.uuid4())
    text = " ".join(
        f"Sentence {i} is about ward {i} and its water supply." for i in range(search_deployment.EMBED_BATCH * 3)
    )

    async def scenario() -> None:
        await store.add_document(_document(tmp_path, kb, "keep", "keep.txt", "Ward 1 keeps its water.", 1))
        with pytest.raises(RuntimeError, match="replica died"):
            await store.add_document(_document(tmp_path, kb, "broken", "broken.txt", text, 1))

    try:
        asyncio.run(scenario())
        assert store.count(kb, "broken") == 0 and store.count(kb) == 1
    finally:
        store.close()


def test_embedded_store_has_one_owner_process(tmp_path: Path) -> None:
    from deployments.search import Search

    settings = _store_settings(tmp_path)
    store = Search(settings, embeddings=object())
    try:
        code = (
            "import sys; from deployments.search import Search\n"
            "try:\n    Search(eval(sys.argv[1]), embeddings=object())\n"
            "except RuntimeError as e:\n    print(e); sys.exit(3)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, repr(settings)], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert "Another process owns the embedded Chroma store" in proc.stdout
        second = Search(settings, embeddings=object())  # the same process shares its store
        second.close()
    finally:
        store.close()
    proc = subprocess.run(
        [sys.executable, "-c", code, repr(settings)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]  # free again once closed

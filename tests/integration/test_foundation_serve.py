"""The foundation through the real Ray Serve application (one session-scoped app)."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.integration


def test_health_reports_every_deployment_healthy(serve_url):
    r = httpx.get(f"{serve_url}/api/v1/health", timeout=30)
    assert r.status_code == 200
    names = {d["name"] for d in r.json()["deployments"] if d["healthy"]}
    assert {"database", "text", "speech", "search", "jobs", "batch"} <= names
    # not deployed on the offline models: the embedder runs inside TextAnalysis and Search, and no
    # translation model is installed
    assert not {"embeddings", "translation"} & {d["name"] for d in r.json()["deployments"]}
    assert httpx.get(f"{serve_url}/health", timeout=30).status_code == 200


def test_auth_errors_and_wire_compat_through_serve(serve_url, make_token):
    r = httpx.post(f"{serve_url}/api/v1//sentiment_analysis/process", json={"encoded_text": "hi"}, timeout=30)
    assert r.status_code == 401 and r.json()["detail"]
    token = make_token("serve-foundation")
    bad = httpx.post(
        f"{serve_url}/api/v1/entity_recognition/process",
        headers={"X-CLIENT-TOKEN": token},
        json={"wrong": 1},
        timeout=30,
    )
    assert bad.status_code == 400 and "encoded_text" in bad.json()["detail"]
    ws = httpx.get(f"{serve_url}//ws/stream-transcribe", headers={"X-CLIENT-TOKEN": token}, timeout=30)
    assert ws.status_code == 200 and ws.content == b""


def test_metadata_docs_and_models_listing(serve_url):
    meta = httpx.get(f"{serve_url}/_meta/version", timeout=30).json()
    assert meta["version"] and meta["git_commit"] and meta["release_name"] and meta["release_date"]
    assert httpx.get(f"{serve_url}/docs", timeout=30).status_code == 200
    assert "/api/v2alpha/transcribe/sync/file" in httpx.get(f"{serve_url}/openapi.json", timeout=30).json()["paths"]
    models = {c["capability"]: c for c in httpx.get(f"{serve_url}/api/v1/models", timeout=60).json()["capabilities"]}
    assert models["translation"]["installed"] is False  # no translation weights ship offline
    assert "khuluma models pull" in models["translation"]["note"]  # told how to install one, as the deployment told
    assert models["translation"]["languages"] and not any(
        lang["supported"] for lang in models["translation"]["languages"]
    )
    assert models["embeddings"]["installed"] is True

"""Foundation: auth, error shape, wire compatibility, OpenAPI, utility routes (in-process, no Ray)."""

from __future__ import annotations

import pytest

from serve_app.app import create_app
from tests.speechdata import SPEC_FIELDS

# Every route of the spec that needs a token, with a minimally valid body where one is needed.
PROTECTED = [
    ("post", "/api/v1/entity_recognition/process", {"encoded_text": "x"}),
    ("post", "/api/v1/sentiment_analysis/process", {"encoded_text": "x"}),
    ("post", "/api/v1/translate/process", {"input_text": "x", "source_lang": "eng_Latn", "target_lang": "zul_Latn"}),
    ("post", "/api/v1/classify", {"examples": [], "inputs": []}),
    ("post", "/api/v1/language/detect", {"text": "x"}),
    ("post", "/api/v1/search/knowledgebase", {"knowledgebase_name": "kb"}),
    ("get", "/api/v1/search/knowledgebases", None),
    ("delete", "/api/v1/search/knowledgebase/00000000-0000-0000-0000-000000000000", None),
    ("post", "/api/v1/search/knowledgebase/00000000-0000-0000-0000-000000000000/document", None),
    ("get", "/api/v1/search/knowledgebase/00000000-0000-0000-0000-000000000000/documents", None),
    ("delete", "/api/v1/search/knowledgebase/document/00000000-0000-0000-0000-000000000000", None),
    ("post", "/api/v1/search/knowledgebase/00000000-0000-0000-0000-000000000000/query", {"query": "q"}),
    ("post", "/api/v1/transcribe/sync", {"file_name": "a.wav", "audio_blob": "", "file_size": 0}),
    ("post", "/api/v1/transport/file-upload", {"file_name": "a.wav", "audio_blob": "", "file_size": 0}),
    ("post", "/api/v1/transcribe/process/abc", {}),
    ("post", "/api/v1/transcribe/abc/get", None),
    ("post", "/api/v2alpha/transcribe/sync/file", None),
    ("post", "/api/v2alpha/transcribe/fast", None),
    ("post", "/api/v2alpha/transcribe/batch", None),
    ("post", "/api/v2alpha/transcribe/batch/abc/process", None),
    ("get", "/api/v2alpha/transcribe/batch", None),
    ("get", "/api/v2alpha/transcribe/batch/abc/transcriptions", None),
    ("post", "/v1/transcribe/sync", None),
    ("get", "/v1/transcribe/usage?start_date_time=2026-01-01T00:00:00Z&end_date_time=2026-01-02T00:00:00Z", None),
    ("get", "/ws/stream-transcribe", None),
]

# JSON routes and a malformed body for each (wrong type of a required field).
JSON_ROUTES = [
    ("/api/v1/entity_recognition/process", "encoded_text"),
    ("/api/v1/sentiment_analysis/process", "encoded_text"),
    ("/api/v1/translate/process", "input_text"),
    ("/api/v1/classify", "examples"),
    ("/api/v1/language/detect", "text"),
    ("/api/v1/search/knowledgebase", "knowledgebase_name"),
    ("/api/v1/search/knowledgebase/00000000-0000-0000-0000-000000000000/query", "query"),
    ("/api/v1/transcribe/sync", "audio_blob"),
    ("/api/v1/transport/file-upload", "audio_blob"),
]


@pytest.fixture()
def client(local_app):
    return local_app()


@pytest.mark.parametrize("method,path,body", PROTECTED)
@pytest.mark.parametrize("token", [None, "khk_wrong-token", ""])
def test_protected_routes_answer_401_without_a_valid_token(client, method, path, body, token):
    headers = {"X-CLIENT-TOKEN": token} if token is not None else {}
    kwargs = {"json": body} if body is not None else {}
    r = client.request(method.upper(), path, headers=headers, **kwargs)
    assert r.status_code == 401, (path, r.status_code, r.text)
    assert set(r.json()) == {"detail"} and r.json()["detail"]


def test_revoked_token_is_refused(client, db):
    from serve_app.tokens import create_token, revoke_token

    token, info = create_token(db, "revoker")
    ok = client.get("/api/v2alpha/transcribe/batch", headers={"X-CLIENT-TOKEN": token})
    assert ok.status_code == 200 and ok.json() == [], ok.text  # accepted: a new customer's (empty) batch list
    assert revoke_token(db, str(info.id))
    from serve_app.context import get_context

    context = client.app.dependency_overrides[get_context]()
    context.tokens._cache.clear()  # the cache would keep it at most token_cache_seconds (test_token_cache.py)
    r = client.get("/api/v2alpha/transcribe/batch", headers={"X-CLIENT-TOKEN": token})
    assert r.status_code == 401


@pytest.mark.parametrize("path,field", JSON_ROUTES)
def test_malformed_json_bodies_answer_400_naming_the_field(client, make_token, path, field):
    headers = {"X-CLIENT-TOKEN": make_token()}
    r = client.post(path, headers=headers, json={field: {"not": "a string"} if field != "examples" else "nope"})
    assert r.status_code == 400, r.text
    assert field in r.json()["detail"]
    missing = client.post(path, headers=headers, json={})
    assert missing.status_code == 400 and "required" in missing.json()["detail"]
    broken = client.post(path, headers={**headers, "Content-Type": "application/json"}, content=b"{not json")
    assert broken.status_code == 400 and "JSON" in broken.json()["detail"]


def test_repeated_slashes_are_collapsed(client):
    r = client.get("/api//v1///health")
    assert r.status_code == 200
    assert client.get("/_meta//version").json()["version"]


def test_bodyless_requests_with_json_content_type_are_accepted(client, make_token):
    headers = {"X-CLIENT-TOKEN": make_token(), "Content-Type": "application/json", "accept": "application/json"}
    # body-less GET/POST/DELETE, as the SDK's requests.Session sends them
    assert client.get("/api/v1/health", headers=headers).status_code == 200
    r = client.post("/api/v1/transcribe/process/unknown-upload", headers=headers)
    # the empty body is read as no options: the route looks the upload up (not a 400 for the body)
    assert r.status_code == 404 and r.json() == {"detail": "Upload unknown-upload not found."}, r.text


def test_unknown_route_is_404_with_the_common_shape(client):
    r = client.get("/api/v1/nope")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}


def test_unexpected_errors_answer_500_without_a_stack_trace(local_app, make_token, monkeypatch):
    client = local_app()
    from serve_app.services import text

    async def boom(*_a, **_k):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(text, "entities", boom)
    r = client.post(
        "/api/v1/entity_recognition/process", headers={"X-CLIENT-TOKEN": make_token()}, json={"encoded_text": "hello"}
    )
    assert r.status_code == 500
    body = r.json()
    assert set(body) == {"detail"} and "secret" not in body["detail"] and "Traceback" not in r.text
    assert r.headers["x-request-id"] in body["detail"]


def test_utility_routes_need_no_token(client):
    meta = client.get("/_meta/version")
    assert meta.status_code == 200 and set(meta.json()) == {"version", "git_commit", "release_name", "release_date"}
    fav = client.get("/favicon.ico")
    assert fav.status_code == 200 and fav.content[:4] == b"\x00\x00\x01\x00"
    for path in ("/api/v1/health", "/health"):
        assert client.get(path).status_code == 200
    models = client.get("/api/v1/models").json()["capabilities"]
    assert {c["capability"] for c in models} >= {"translation", "transcription", "entity_recognition"}
    assert all(c["installed"] is False for c in models)  # nothing deployed in this client


class _Broken:
    """A deployment whose health probe fails (run as a real Serve deployment in local testing mode)."""

    def ping(self) -> None:
        raise RuntimeError("down")


def test_health_reports_each_deployment_and_degrades(settings):
    from ray import serve

    from tests.conftest import client_for

    handle = serve.run(
        serve.deployment(_Broken).bind(), name="broken-text", route_prefix=None, _local_testing_mode=True
    )
    client = client_for(settings, {"text": handle})
    r = client.get("/api/v1/health")
    assert r.status_code == 503
    by_name = {d["name"]: d for d in r.json()["deployments"]}
    assert by_name["text"]["healthy"] is False and by_name["database"]["healthy"] is True


def test_websocket_refuses_unauthenticated_upgrade(client):
    from starlette.testclient import WebSocketDenialResponse

    with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect("/ws/stream-transcribe"):
        pass
    assert denied.value.status_code == 401


def test_websocket_get_authenticates(client, make_token):
    assert client.get("/ws/stream-transcribe", headers={"X-CLIENT-TOKEN": make_token()}).status_code == 200


def test_openapi_lists_every_spec_route_with_spec_field_names():
    spec = create_app().openapi()
    paths = spec["paths"]
    for _method, path, _ in PROTECTED:
        clean = path.split("?")[0].replace("00000000-0000-0000-0000-000000000000", "{knowledgebase_id}")
        clean = clean.replace("/abc/get", "/{upload_id}/get").replace("/process/abc", "/process/{upload_id}")
        clean = clean.replace("batch/abc", "batch/{batch_id}")
        if "knowledgebase/document/" in clean:
            clean = "/api/v1/search/knowledgebase/document/{document_id}"
        assert clean in paths, clean
    # Every utility route of the spec is declared (create_app mounts these routers; test_utility_routes_need_no_token
    # calls them): the live one with the live routes; all but the favicon are in the API description too.
    from serve_app.routers import live, utility

    served = {getattr(route, "path", None) for route in utility.router.routes}
    for path in ("/_meta/version", "/favicon.ico", "/api/v1/health", "/health"):
        assert path in served, path
    assert "/ws/stream-transcribe" in {getattr(route, "path", None) for route in live.router.routes}
    for path in ("/_meta/version", "/api/v1/health", "/health"):
        assert path in paths, path
    assert "/favicon.ico" not in paths  # a browser's request, not part of the API
    schemas = spec["components"]["schemas"]
    assert set(schemas["SentimentResult"]["properties"]) == {"Id", "Sentiments"}
    assert {"upload_id", "customer_id", "project_id"} <= set(schemas["UploadResult"]["properties"])
    record = set(schemas["TranscriptionRecord"]["properties"])
    assert record >= SPEC_FIELDS
    upload = paths["/api/v2alpha/transcribe/sync/file"]["post"]["requestBody"]["content"]
    assert "file" in upload["multipart/form-data"]["schema"]["properties"]

"""Body size limits before any parsing (serve_app/middleware.py BodyLimitMiddleware): by Content-Length, and by
counting a chunked body as it streams in; JSON and multipart each with their setting."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

MB = 1024 * 1024


@pytest.fixture()
def small_limits(local_app, make_token):  # type: ignore[no-untyped-def]
    client = local_app(max_json_mb=1, max_request_mb=2)
    return client, {"X-CLIENT-TOKEN": make_token("body-limits")}


def _chunks(total: int, prefix: bytes = b"", chunk: int = 64 * 1024) -> Iterator[bytes]:
    yield prefix
    sent = len(prefix)
    while sent < total:
        piece = b"A" * min(chunk, total - sent)
        sent += len(piece)
        yield piece


def test_a_json_body_over_the_limit_is_refused_before_parsing(small_limits) -> None:
    client, h = small_limits
    examples = [{"intent": "greet", "example": "hello " * 100}] * 3000  # ~1.8 MB of JSON: over 1 MB
    r = client.post("/api/v1/classify", headers=h, json={"examples": examples, "inputs": ["hi"]})
    assert r.status_code == 413 and "KHULUMA_MAX_JSON_MB" in r.json()["detail"], r.text
    assert r.headers["x-request-id"]


def test_the_v1_base64_routes_take_the_base64_of_a_whole_file(small_limits) -> None:
    """Spec: v1 files up to max_request_mb (1 GB) arrive base64 in JSON: their limit is 4/3 of that, not the
    small JSON one; over it, 413 naming the setting."""
    client, h = small_limits
    size = 3 * MB // 2
    blob = base64.b64encode(b"\0" * size).decode()  # 2 MB of base64 for a 1.5 MB file: under 2 MB x 4/3
    body = {"file_name": "a.wav", "audio_blob": blob, "file_size": size}
    r = client.post("/api/v1/transport/file-upload", headers=h, json=body)
    assert r.status_code == 200 and r.json()["upload_id"], r.text  # stored: the body was read whole
    blob = base64.b64encode(b"\0" * (3 * MB)).decode()  # a 3 MB file: over the 2 MB file limit
    r = client.post("/api/v1/transport/file-upload", headers=h, json={"file_name": "a.wav", "audio_blob": blob})
    assert r.status_code == 413 and "KHULUMA_MAX_REQUEST_MB, as base64" in r.json()["detail"], r.text


def test_a_chunked_json_body_is_counted_as_it_streams(small_limits) -> None:
    client, h = small_limits
    for route, setting in [
        ("/api/v1/language/detect", "KHULUMA_MAX_JSON_MB"),
        ("/api/v1/transport/file-upload", "KHULUMA_MAX_REQUEST_MB, as base64"),
    ]:
        body = _chunks(50 * MB, prefix=b'{"file_name": "a.wav", "audio_blob": "')  # no Content-Length
        r = client.post(route, headers={**h, "content-type": "application/json"}, content=body)
        assert r.status_code == 413 and setting in r.json()["detail"], (route, r.text)


def test_a_chunked_multipart_upload_over_its_limit_is_refused(small_limits) -> None:
    client, h = small_limits
    boundary = "b0undary"
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'.encode()
    r = client.post(
        "/api/v2alpha/transcribe/sync/file",
        headers={**h, "content-type": f"multipart/form-data; boundary={boundary}"},
        content=_chunks(40 * MB, prefix=head),
    )
    assert r.status_code == 413 and "KHULUMA_MAX_REQUEST_MB" in r.json()["detail"], r.text


def test_bodies_under_the_limits_pass(small_limits) -> None:
    client, h = small_limits
    r = client.post("/api/v1/sentiment_analysis/process", headers=h, json={"encoded_text": "x" * 1000})
    # reaches the route, which answers that no text deployment runs in this client
    assert r.status_code == 503 and r.json() == {"detail": "The text capability is not deployed in this service."}
    r = client.post(
        "/api/v1/transport/file-upload", headers=h, json={"file_name": "a.wav", "audio_blob": "!!", "file_size": 2}
    )
    assert r.status_code == 400 and r.json() == {"detail": "field 'audio_blob' is not valid base64."}  # read, refused

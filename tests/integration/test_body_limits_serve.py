"""Body limits on the real Serve application: a chunked body far over the JSON limit (16 MB) is refused with 413 while
the ingress replica's memory stays where it was (nothing is buffered before the check)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.replicas import own_replica_processes

pytestmark = pytest.mark.integration

MB = 1024 * 1024


def _ingress_rss() -> int:
    procs = own_replica_processes("Ingress")  # this session's cluster only
    assert procs, "no Ingress replica process found"
    return sum(p.memory_info().rss for p in procs)


def _body(total: int) -> Iterator[bytes]:
    yield b'{"text": "'
    chunk = b"QUFB" * (16 * 1024)  # 64 KiB of base64
    for _ in range(total // len(chunk)):
        yield chunk


def test_a_chunked_body_far_over_the_limit_costs_no_memory(serve_url: str, make_token) -> None:
    h = {"X-CLIENT-TOKEN": make_token("body-limit-serve"), "content-type": "application/json"}
    before = _ingress_rss()
    try:
        r = httpx.post(f"{serve_url}/api/v1/language/detect", headers=h, content=_body(400 * MB), timeout=120)
    except httpx.HTTPError as exc:  # the server may close the connection while the client is still sending
        pytest.fail(f"no 413 answer: {exc!r}")
    assert r.status_code == 413, r.text[:300]
    assert "KHULUMA_MAX_JSON_MB" in r.json()["detail"]
    grown = _ingress_rss() - before
    assert grown < 64 * MB, f"the ingress grew by {grown / MB:.0f} MB for a refused body"

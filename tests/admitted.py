"""A client that honours admission: a 503 with ``Retry-After`` (refused before any work, at capacity) is sent again
when told, as the SDKs do. For tests that send bursts to the shared Serve app, whose learned capacity on a slow or
busy machine may be below the burst."""

from __future__ import annotations

import time
from typing import Any

import httpx

ATTEMPTS = 6
MAX_WAIT_S = 15.0


def post_admitted(url: str, **kwargs: Any) -> httpx.Response:
    """``httpx.post(url, **kwargs)``, sent again after each 503's ``Retry-After`` (at most :data:`ATTEMPTS` times)."""
    response = httpx.post(url, **kwargs)
    for _ in range(ATTEMPTS - 1):
        retry_after = response.headers.get("Retry-After", "")
        if response.status_code != 503 or not retry_after.isdigit():
            break
        assert float(retry_after) <= MAX_WAIT_S, response.headers
        time.sleep(float(retry_after))
        response = httpx.post(url, **kwargs)
    return response

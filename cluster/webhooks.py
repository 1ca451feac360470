"""Webhook URLs, signatures and deliveries of async v1 jobs.

Here, below both users, so the ingress (it refuses a bad URL when a job is placed) and the ``Jobs`` deployment (it
checks the URL again and delivers) share one policy without the deployment importing ``serve_app``.

Each delivery is a ``POST`` of a JSON body with the headers::

    Content-Type: application/json
    X-Khuluma-Timestamp: <unix seconds>
    X-Khuluma-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>
    X-Khuluma-Upload-Id: <upload id>
    X-Khuluma-Delivery-Attempt: <1, 2, ...>

where ``secret`` is the webhook secret of the API token that uploaded the file (``khuluma token secret <id>``),
used as its UTF-8 bytes. Any 2xx answer is a delivery; anything else (or no answer) is retried with exponential
backoff; 410 Gone stops the retries. Redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from contracts.errors import InvalidInput

SIGNATURE_HEADER = "X-Khuluma-Signature"
TIMESTAMP_HEADER = "X-Khuluma-Timestamp"
USER_AGENT = "khuluma-webhooks/1"


# --------------------------------------------------------------------------- URL policy


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_webhook_url(url: str, allow_private: bool) -> str:
    """The URL if it may receive webhooks, else :class:`InvalidInput` naming the reason.

    Only http(s). Unless ``allow_private``, the host must resolve, and only to public addresses (no loopback,
    private, link-local, carrier-grade NAT, multicast or reserved ranges): the service must not be usable to
    reach its own network.
    """
    url = (url or "").strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"field 'webhook' is not a valid URL: {exc}.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("field 'webhook' must be an absolute http:// or https:// URL.")
    if len(url) > 2000:
        raise InvalidInput("field 'webhook' is longer than 2000 characters.")
    if allow_private:
        return url
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise InvalidInput(f"field 'webhook': the host {host!r} cannot be resolved.") from None
    addresses = {str(info[4][0]) for info in infos}
    blocked = sorted(a for a in addresses if not _is_public(a))
    if blocked:
        raise InvalidInput(
            f"field 'webhook': {host!r} resolves to a loopback, private or link-local address ({blocked[0]}); "
            "such receivers are refused (an operator can allow them with KHULUMA_WEBHOOKS_ALLOW_PRIVATE=true)."
        )
    return url


async def check_webhook_url_async(url: str, allow_private: bool) -> str:
    return await anyio.to_thread.run_sync(check_webhook_url, url, allow_private)


# --------------------------------------------------------------------------- signatures


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``f"{timestamp}."`` + body, keyed with the secret's UTF-8 bytes."""
    return hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def verify(
    secret: str, timestamp: str, body: bytes, signature: str, tolerance_seconds: float = 300.0, now: float | None = None
) -> bool:
    """What a receiver does: constant-time compare, and refuse stale timestamps (replays)."""
    try:
        age = abs((now if now is not None else time.time()) - int(timestamp))
    except ValueError:
        return False
    expected = "sha256=" + sign(secret, timestamp, body)
    return age <= tolerance_seconds and hmac.compare_digest(expected, signature)


def encode_body(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def signed_headers(secret: str, body: bytes, upload_id: str, attempt: int) -> dict[str, str]:
    timestamp = str(int(time.time()))
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: "sha256=" + sign(secret, timestamp, body),
        "X-Khuluma-Upload-Id": upload_id,
        "X-Khuluma-Delivery-Attempt": str(attempt),
    }


# --------------------------------------------------------------------------- payload


# --------------------------------------------------------------------------- delivery


@dataclass(frozen=True)
class DeliveryResult:
    delivered: bool
    permanent: bool  # do not retry
    detail: str


async def deliver(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], secret: str, attempt: int, allow_private: bool
) -> DeliveryResult:
    """One signed POST. The URL is checked again (its DNS may have changed since the job was placed)."""
    try:
        await check_webhook_url_async(url, allow_private)
    except InvalidInput as exc:
        return DeliveryResult(False, True, exc.detail)
    body = encode_body(payload)
    headers = signed_headers(secret, body, str(payload.get("upload_id", "")), attempt)
    try:
        response = await client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return DeliveryResult(False, False, f"{type(exc).__name__}: {exc}")
    if 200 <= response.status_code < 300:
        return DeliveryResult(True, False, f"HTTP {response.status_code}")
    return DeliveryResult(False, response.status_code == 410, f"HTTP {response.status_code}")


def retry_delay(failures: int, base: float, cap: float, budget: float) -> float | None:
    """Delay before the next attempt after ``failures`` failed ones (base, 2*base, 4*base, ... capped), or None
    once the whole schedule would run past ``budget`` seconds. Depends only on the count stored in the
    database, so the schedule survives restarts."""
    delays = [min(base * 2**k, cap) for k in range(failures)]
    if sum(delays) > budget:
        return None
    return delays[-1] if delays else 0.0

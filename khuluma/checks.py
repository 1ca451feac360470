"""Start-up checks: before any replica starts, each dependency the configuration names is tried once, and a
missing one stops the deploy with ONE clear line, instead of replicas that crash-loop or wait forever.

Run by the application builder (``khuluma.app.build_app``), so ``khuluma serve``, ``serve run`` and ``serve
deploy`` all get them: GPUs asked for but absent; the database unreachable or not migrated; object storage
unreachable; the Chroma server unreachable. Each check is bounded by a few seconds.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlparse

from contracts.settings import Settings

TIMEOUT_S = 5.0


class StartupCheckFailed(RuntimeError):
    """A dependency of the configuration is missing; the message is one line that says what to fix."""


def _redacted(url: str) -> str:
    return url.split("@")[-1]


def check_database(settings: Settings) -> None:
    from persistence.session import Database, SchemaOutOfDate

    url = settings.db_url
    try:
        db = Database(url)
        db.require_current_schema()
    except SchemaOutOfDate as exc:
        raise StartupCheckFailed(f"Database {_redacted(url)}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any driver error: unreachable, refused, bad credentials
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StartupCheckFailed(
            f"Database {_redacted(url)} is unreachable ({type(exc).__name__}: {first[:200]}); check "
            "KHULUMA_DATABASE_URL and that the server is up."
        ) from None


def _reachable(url: str, default_port: int) -> str | None:
    """None when a TCP connection opens within the timeout; else why not."""
    parsed = urlparse(url if "://" in url else f"http://{url}")
    host, port = parsed.hostname or "localhost", parsed.port or default_port
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            return None
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"


def check_object_storage(settings: Settings) -> None:
    endpoint = settings.s3.endpoint_url
    if not endpoint:
        return  # `khuluma serve` starts its own; without it, batches and large uploads answer 503 naming the setting
    why = _reachable(endpoint, 443 if endpoint.startswith("https") else 80)
    if why:
        raise StartupCheckFailed(
            f"Object storage {endpoint} is unreachable ({why}); check KHULUMA_S3_ENDPOINT_URL and that it is up."
        )
    from cluster.s3 import s3_client

    try:
        s3_client(settings.s3).list_buckets()
    except Exception as exc:  # noqa: BLE001 - refused credentials, not an S3 service
        raise StartupCheckFailed(
            f"Object storage {endpoint} refused the service ({type(exc).__name__}: {str(exc)[:200]}); check "
            "KHULUMA_S3_ACCESS_KEY / KHULUMA_S3_SECRET_KEY."
        ) from None


def check_chroma(settings: Settings) -> None:
    url = settings.search.chroma_url
    if not url:
        return  # embedded store: nothing to reach
    why = _reachable(url, 8000)
    if why:
        raise StartupCheckFailed(
            f"Chroma server {url} is unreachable ({why}); check KHULUMA_SEARCH_CHROMA_URL and that `chroma run` is up."
        )


def run_startup_checks(settings: Settings, deployed: set[str], options: dict[str, dict[str, Any]]) -> None:
    """Every check that applies to the deployments being deployed (backend names of ``khuluma.app.SPECS``)."""
    check_database(settings)
    if deployed & {"batch", "speech", "search", "jobs"}:
        check_object_storage(settings)
    if "search" in deployed:
        check_chroma(settings)

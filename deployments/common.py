"""Helpers shared by deployments."""

from __future__ import annotations

from typing import Any

from cluster.request_context import serve_request_id
from contracts.logs import configure_logging
from contracts.settings import Settings

__all__ = ["configure_replica_logging", "load_settings"]


def configure_replica_logging(deployment: str, settings: Settings) -> None:
    """JSON log lines on the replica's standard error (Ray's worker logs, the driver's console), each with the
    id of the request being served (the ingress's id: Serve carries it through handle calls)."""
    configure_logging(deployment, serve_request_id, settings.log_level)


def load_settings(bound: dict[str, Any] | Settings | None) -> Settings:
    """A replica's settings: the non-secret sections it was bound with, then its own environment (secrets)."""
    if isinstance(bound, Settings):
        return bound
    return Settings.from_bound(bound)

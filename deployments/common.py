"""Helpers shared by deployments."""

from __future__ import annotations

import logging
from typing import Any

from contracts.logs import configure_logging
from contracts.settings import Settings
from contracts.settings.variables import report_setting_warnings
from runtime.request_context import serve_request_id

__all__ = ["configure_replica_logging", "load_settings"]


def configure_replica_logging(deployment: str, settings: Settings) -> None:
    """JSON log lines on the replica's standard error (Ray's worker logs, the driver's console), each with the
    id of the request being served (the ingress's id: Serve carries it through handle calls). Then a warning, once
    per process, for each ``KHULUMA_*`` variable of the replica's environment that no setting reads (each node has
    its own environment): the operator of a ``serve deploy`` sees a misspelt or renamed setting in the logs."""
    configure_logging(deployment, serve_request_id, settings.log_level)
    report_setting_warnings(logging.getLogger("khuluma.settings").warning)


def load_settings(bound: dict[str, Any] | Settings | None) -> Settings:
    """A replica's settings: the non-secret sections it was bound with, then its own environment (secrets)."""
    if isinstance(bound, Settings):
        return bound
    return Settings.from_bound(bound)

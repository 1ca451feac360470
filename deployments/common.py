"""Helpers shared by deployments."""

from __future__ import annotations

from typing import Any

from contracts.logs import configure_logging
from contracts.settings import Settings

__all__ = ["configure_logging", "load_settings"]


def load_settings(bound: dict[str, Any] | Settings | None) -> Settings:
    """A replica's settings: the non-secret sections it was bound with, then its own environment (secrets)."""
    if isinstance(bound, Settings):
        return bound
    return Settings.from_bound(bound)

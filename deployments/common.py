"""Helpers shared by deployments."""

from __future__ import annotations

import logging
from typing import Any

from serve_app.settings import Settings


def load_settings(settings: dict[str, Any] | Settings | None) -> Settings:
    """Deployments receive the driver's settings as a dict (the ingress and every replica agree)."""
    if isinstance(settings, Settings):
        return settings
    return Settings(**(settings or {}))


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


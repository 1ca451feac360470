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


def not_installed(capability: str, note: str) -> dict[str, Any]:
    return {"capability": capability, "installed": False, "note": note}


class PlaceholderDeployment:
    """A deployment whose capability is not built yet: healthy, and honest in ``describe``."""

    capabilities: tuple[str, ...] = ()

    def __init__(self, settings: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> None:
        self.settings = load_settings(settings)

    def ping(self) -> bool:
        return True

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.user_config = dict(config or {})

    def describe(self) -> list[dict[str, Any]]:
        return [not_installed(c, "Not yet available in this build.") for c in self.capabilities]

"""The Ray Serve ingress deployment: the FastAPI app, with typed handles to the model deployments."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from ray import serve

from contracts.logs import configure_logging
from contracts.settings import Settings
from serve_app.app import create_app
from serve_app.context import Clients, build_context


@serve.ingress()
class Ingress:
    def __init__(self, settings: dict[str, Any], **handles: Any) -> None:
        configure_logging()
        self.settings = Settings.from_bound(settings)
        self.context = build_context(self.settings, Clients.from_handles(**handles))
        self.context.db.require_current_schema()  # migrations run once before the app starts, never here

    def __serve_build_asgi_app__(self) -> FastAPI:  # called by Serve after __init__
        app = create_app(self.settings.cors_origins)
        app.state.context = self.context
        return app

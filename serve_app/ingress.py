"""The Ray Serve ingress deployment: the FastAPI app, with typed handles to the model deployments."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI
from ray import serve

from contracts.logs import configure_logging
from contracts.settings import Settings, report_setting_warnings
from serve_app.app import create_app
from serve_app.context import Clients, build_context
from serve_app.middleware import current_request_id


@serve.ingress()
class Ingress:
    def __init__(self, settings: dict[str, Any], **handles: Any) -> None:
        self.settings = Settings.from_bound(settings)
        configure_logging("Ingress", current_request_id, self.settings.log_level)
        report_setting_warnings(logging.getLogger("khuluma.settings").warning)  # unknown KHULUMA_* names, once
        self.context = build_context(self.settings, Clients.from_handles(self.settings, **handles))
        self.context.db.require_current_schema()  # migrations run once before the app starts, never here

    def __del__(self) -> None:
        """Serve calls this on a graceful replica shutdown: usage rows not yet written go now."""
        context = getattr(self, "context", None)
        if context is not None:
            context.usage.close()

    def __serve_build_asgi_app__(self) -> FastAPI:  # called by Serve after __init__
        app = create_app(self.settings)
        app.state.context = self.context
        return app

"""The Ray Serve ingress deployment: the FastAPI app, with handles to the model deployments."""

from __future__ import annotations

from typing import Any

from ray import serve

from deployments.common import configure_logging, load_settings
from serve_app.app import create_app
from serve_app.backends import Backends
from serve_app.context import build_context, set_context


@serve.ingress()
class Ingress:
    def __init__(self, settings: dict[str, Any], **handles: Any) -> None:
        configure_logging()
        self.settings = load_settings(settings)
        set_context(build_context(self.settings, Backends.wrap(**handles)))

    def __serve_build_asgi_app__(self):  # called by Serve after __init__
        return create_app(self.settings.cors_origins)

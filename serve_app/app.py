"""The FastAPI application (ingress). It knows capabilities and schemas, never models.

:func:`create_app` builds routes only; whoever serves the app puts an :class:`~serve_app.context.AppContext` on
``app.state.context`` (the Serve ingress, the plain-uvicorn bench launcher) or overrides ``get_context`` (tests).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from serve_app import __version__
from serve_app.errors import install_error_handlers
from serve_app.middleware import WireCompatMiddleware
from serve_app.routers import batch, search, text, transcribe_v1, transcribe_v2, translate, usage, utility

DESCRIPTION = """Khuluma: a self-hostable, Vulavula-compatible language, search and speech API.

Authenticate with the `X-CLIENT-TOKEN` header (`khuluma token create`). Errors are `{"detail": "..."}`.
`GET /api/v1/models` tells which models and languages this deployment really serves."""


def create_app(cors_origins: list[str] | None = None) -> FastAPI:
    app = FastAPI(title="Khuluma", version=__version__, description=DESCRIPTION)
    for module in (text, translate, search, transcribe_v1, transcribe_v2, batch, usage, utility):
        app.include_router(module.router)
    install_error_handlers(app)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(WireCompatMiddleware)
    return app

"""The FastAPI application (ingress). It knows capabilities and schemas, never models.

:func:`create_app` builds routes only; whoever serves the app puts an :class:`~serve_app.context.AppContext` on
``app.state.context`` (the Serve ingress, the plain-uvicorn bench launcher) or overrides ``get_context`` (tests).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from contracts.settings import Settings
from serve_app import __version__
from serve_app.admission.capacity import Capacity
from serve_app.admission.kinds import RouteKinds
from serve_app.errors import install_error_handlers
from serve_app.lifecycle import Drain
from serve_app.middleware import AdmissionMiddleware, BodyLimitMiddleware, MetricsMiddleware, WireCompatMiddleware
from serve_app.routers import (
    batch,
    live,
    openai,
    playground,
    profile,
    search,
    speech_v1,
    speech_v2,
    text,
    translation,
    usage,
    utility,
)

DESCRIPTION = """Khuluma: a self-hostable, Vulavula-compatible language, search and speech API.

Authenticate with the `X-CLIENT-TOKEN` header (`khuluma token create`). Errors are `{"detail": "..."}`, except on
the OpenAI-compatible routes (`/v1/audio/...`, `/v1/embeddings`, `/v1/chat/completions`, `/v1/models`:
`Authorization: Bearer <token>`), which answer OpenAI's `{"error": {...}}`; the self-hosted profile
(`/v1/translate`, `/v1/transcribe`) also takes HTTP Basic auth with the token as the password
(docs/compatibility.md).
`GET /api/v1/models` tells which models and languages this deployment really serves."""


# The v1 routes whose JSON carries a whole audio file as base64 (spec: files up to 1 GB).
V1_BASE64_AUDIO_ROUTES = frozenset({"/api/v1/transcribe/sync", "/api/v1/transport/file-upload"})


def create_app(
    settings: Settings | None = None, drain: Drain | None = None, capacity: Capacity | None = None
) -> FastAPI:
    """The ingress's FastAPI app; ``settings`` give the CORS origins, the body limits and admission (default:
    defaults); ``drain`` is the replica's graceful-stop state and ``capacity`` its admission by capacity (the
    context's, so routes and middleware share them; default: new ones, ``drain`` on ``app.state.drain``)."""
    settings = settings or Settings(_env_file=None)
    app = FastAPI(title="Khuluma", version=__version__, description=DESCRIPTION)
    app.state.drain = drain = drain or Drain()
    for module in (
        text,
        translation,
        search,
        speech_v1,
        speech_v2,
        batch,
        usage,
        live,
        utility,
        playground,
        openai,
        profile,
    ):
        app.include_router(module.router)
    install_error_handlers(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(
        BodyLimitMiddleware,
        max_json_bytes=int(settings.max_json_mb * 1024 * 1024),
        max_upload_bytes=int(settings.max_request_mb * 1024 * 1024),
        base64_paths=V1_BASE64_AUDIO_ROUTES,
    )
    app.add_middleware(MetricsMiddleware)
    app.add_middleware(WireCompatMiddleware)  # every answer past admission, a 413 included, carries the request id
    # outermost: refused while draining or past this server's capacity for the kind of work, before routing,
    # authentication and the body, so a refusal costs as little as it can
    app.add_middleware(
        AdmissionMiddleware,
        drain=drain,
        capacity=capacity or Capacity(settings.admission),
        kinds=RouteKinds.of(app.routes),  # each model-bound route's kind of work, as the route declares it
    )
    return app

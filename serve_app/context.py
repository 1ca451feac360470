"""The per-process state the routes use: settings, database, token verifier and model backends.

Set once per process (Ray Serve ingress replica or plain uvicorn) with :func:`set_context`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from serve_app.backends import Backends
from serve_app.db.session import Database
from serve_app.errors import ServiceUnavailable
from serve_app.settings import Settings
from serve_app.tokens import TokenVerifier


@dataclass
class AppContext:
    settings: Settings
    db: Database
    tokens: TokenVerifier
    backends: Backends
    started_at: float = field(default_factory=time.time)


_current: AppContext | None = None


def build_context(settings: Settings, backends: Backends) -> AppContext:
    settings.ensure_dirs()
    db = Database(settings.db_url)
    return AppContext(settings, db, TokenVerifier(db, settings.token_cache_seconds), backends)


def set_context(ctx: AppContext | None) -> None:
    global _current
    _current = ctx


async def get_context() -> AppContext:
    """FastAPI dependency. Async on purpose: a sync dependency would cost a thread-pool hop per request."""
    return current_context()


def current_context() -> AppContext:
    if _current is None:
        raise ServiceUnavailable("The service is starting; try again in a moment.")
    return _current

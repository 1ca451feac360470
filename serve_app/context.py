"""What the routes work with: settings, the database, the token verifier and the typed handles of the deployments.

The ingress builds one :class:`AppContext` and puts it on ``app.state.context``; routes get it through the
:func:`get_context` dependency (tests replace it with ``app.dependency_overrides``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from starlette.requests import HTTPConnection

from contracts.batch import BatchClient
from contracts.embeddings import EmbeddingsClient
from contracts.errors import NotDeployed, Unavailable
from contracts.handles import DeploymentClient
from contracts.jobs import JobsClient
from contracts.llm import LLMClient
from contracts.search import SearchClient
from contracts.settings import Settings
from contracts.speech import SpeechClient
from contracts.text import TextClient
from contracts.translation import TranslationClient
from persistence.session import Database
from persistence.usage_meter import UsageMeter
from serve_app.admission import Admission
from serve_app.admission.live import TimedSpeechClient
from serve_app.lifecycle import Drain
from serve_app.tokens import TokenVerifier

C = TypeVar("C", bound=DeploymentClient)


@dataclass
class Clients:
    """One typed handle per model deployment; ``None`` where the capability is not deployed."""

    text: TextClient | None = None
    embeddings: EmbeddingsClient | None = None
    translation: TranslationClient | None = None
    speech: SpeechClient | None = None
    search: SearchClient | None = None
    llm: LLMClient | None = None
    jobs: JobsClient | None = None
    batch: BatchClient | None = None

    @classmethod
    def from_handles(cls, settings: Settings | None = None, **handles: Any) -> Clients:
        """Wrap Serve ``DeploymentHandle``s, keyed like the fields, each in its typed handle (tuned by ``settings``
        where it has options; without them, its defaults)."""
        return cls(
            **{
                name: _TYPED_HANDLES[name].configured(h, settings) if settings else _TYPED_HANDLES[name](h)
                for name, h in handles.items()
                if h is not None
            }
        )

    def deployed(self) -> list[tuple[str, DeploymentClient]]:
        """(capability, typed handle) of every deployment in this service, as /api/v1/health names them."""
        return [(f.name, c) for f in fields(self) if (c := getattr(self, f.name)) is not None]


_TYPED_HANDLES: dict[str, Any] = {
    "text": TextClient,
    "embeddings": EmbeddingsClient,
    "translation": TranslationClient,
    "speech": TimedSpeechClient,  # its live steps timed against their live sessions (live admission)
    "search": SearchClient,
    "llm": LLMClient,
    "jobs": JobsClient,
    "batch": BatchClient,
}


def required(client: C | None, capability: str) -> C:
    """The handle, or 503 when its deployment is not part of this service."""
    if client is None:
        raise NotDeployed(f"The {capability} capability is not deployed in this service.")
    return client


TRANSCRIPTION = "transcription"  # speech's published capability name (/api/v1/models, health)


def speech_client(ctx: AppContext) -> SpeechClient:
    """The Speech deployment's handle, or 503 naming speech's published capability (``transcription``)."""
    return required(ctx.clients.speech, TRANSCRIPTION)


@dataclass
class AppContext:
    settings: Settings
    db: Database
    tokens: TokenVerifier
    clients: Clients
    usage: UsageMeter
    admission: Admission
    drain: Drain = field(default_factory=Drain)
    started_at: float = field(default_factory=time.time)

    @property
    def translation_not_installed(self) -> bool:
        """Translation is not deployed because no model is set (``translation.deploy`` auto): the ingress answers
        for it as the deployment would without a model."""
        return self.clients.translation is None and not self.settings.translation.model

    @property
    def answers_extractively(self) -> bool:
        """No language model is deployed because none is set (``llm.deploy`` auto): answers from a knowledge base
        are the extractive answerer's (passage sentences), and a chat without one is the 503 naming the setting."""
        return self.clients.llm is None and not self.settings.llm.model


def build_context(settings: Settings, clients: Clients) -> AppContext:
    settings.ensure_dirs()
    db = Database(settings.db_url)
    usage = UsageMeter(db, settings.usage_flush_seconds)
    admission = Admission.of(db, usage, settings.admission)
    return AppContext(
        settings,
        db,
        TokenVerifier(db, settings.token_cache_seconds, settings.token_cache_size),
        clients,
        usage,
        admission,
    )


async def get_context(connection: HTTPConnection) -> AppContext:
    """FastAPI dependency (HTTP and WebSocket). Async on purpose: a sync dependency costs a thread-pool hop."""
    context: AppContext | None = getattr(connection.app.state, "context", None)
    if context is None:
        raise Unavailable("The service is starting; try again in a moment.")
    return context

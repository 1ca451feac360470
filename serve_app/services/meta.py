"""Version metadata, health probes and the models listing, over the typed handles of the deployed capabilities."""

from __future__ import annotations

import asyncio
import subprocess
import time
from functools import lru_cache
from pathlib import Path

import anyio
from sqlalchemy import text

from contracts.capabilities import CapabilityInfo
from contracts.errors import Overloaded
from contracts.handles import DeploymentClient
from contracts.llm import extractive_answerer
from contracts.meta import DeploymentHealth, Health, Metadata, ModelsListing
from contracts.translation import not_installed as translation_not_installed
from serve_app import RELEASE_DATE, RELEASE_NAME, __version__
from serve_app.context import AppContext

# The capabilities /api/v1/models always lists, in this order; one whose deployment is not running is listed as
# not installed. (TextAnalysis describes the first four, then Embeddings, Translation, Search, LLM, Transcription
# and Jobs (batch transcription) one each.)
CAPABILITIES = (
    "entity_recognition",
    "sentiment_analysis",
    "intent_classification",
    "language_identification",
    "embeddings",
    "translation",
    "knowledge_base_search",
    "llm",
    "transcription",
    "batch_transcription",
)
PING_TIMEOUT_S = 5.0
# A deployment that answered a call this recently is alive: under load the probe does not queue a ping behind the
# requests it is busy with (nor get shed by its full queue), so health stays answerable when the service is not.
ANSWERED_WITHIN_S = 10.0
DESCRIBE_TIMEOUT_S = 10.0
DB_CHECK_MAX_AGE_S = 1.0


@lru_cache
def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            text=True,
            capture_output=True,
            timeout=5,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def metadata(ctx: AppContext) -> Metadata:
    return Metadata(
        version=__version__,
        git_commit=ctx.settings.git_commit or _git_commit(),
        release_name=ctx.settings.release_name or RELEASE_NAME,
        release_date=RELEASE_DATE,
    )


async def health(ctx: AppContext, timeout: float = PING_TIMEOUT_S) -> Health:
    """The database and every deployed capability, each probed at once; ``degraded`` when any does not answer,
    ``draining`` (no probe) during a graceful stop.

    A capability whose deployment answered a call in the last :data:`ANSWERED_WITHIN_S` is healthy without a ping,
    and one whose queue is full (the ping is refused with :class:`Overloaded`) is healthy too: it is alive and
    refusing work past its capacity, which is what it should do. Neither goes through the model's queue, so a
    loaded service stays answerable.
    """
    if ctx.drain.draining:
        return Health(status="draining", deployments=[])

    async def probe(name: str, client: DeploymentClient) -> DeploymentHealth:
        if client.answered_within(ANSWERED_WITHIN_S):
            return DeploymentHealth(name=name, healthy=True)
        try:
            await client.ping(timeout)
            return DeploymentHealth(name=name, healthy=True)
        except Overloaded:
            return DeploymentHealth(name=name, healthy=True)
        except TimeoutError:
            return DeploymentHealth(name=name, healthy=False, detail=f"no answer within {timeout:.0f} s")
        except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
            return DeploymentHealth(name=name, healthy=False, detail=type(exc).__name__)

    deployments = [await _db_health(ctx)]
    deployments += await asyncio.gather(*(probe(name, client) for name, client in ctx.clients.deployed()))
    ok = all(d.healthy for d in deployments)
    return Health(status="ok" if ok else "degraded", deployments=deployments)


# database URL -> (monotonic time of the check, its result): probes can be frequent, the database is asked at most
# once per DB_CHECK_MAX_AGE_S.
_db_checked: dict[str, tuple[float, DeploymentHealth]] = {}


async def _db_health(ctx: AppContext) -> DeploymentHealth:
    """SELECT 1, off the event loop."""
    cached = _db_checked.get(ctx.db.url)
    if cached and time.monotonic() - cached[0] < DB_CHECK_MAX_AGE_S:
        return cached[1]

    def check() -> DeploymentHealth:
        try:
            with ctx.db.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return DeploymentHealth(name="database", healthy=True)
        except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
            return DeploymentHealth(name="database", healthy=False, detail=type(exc).__name__)

    result = await anyio.to_thread.run_sync(check)
    _db_checked[ctx.db.url] = (time.monotonic(), result)
    return result


async def models(ctx: AppContext) -> ModelsListing:
    """Ask every deployment what it really has loaded; capabilities without a deployment are not installed."""

    async def ask(client: DeploymentClient) -> list[CapabilityInfo]:
        try:
            return await client.describe(DESCRIBE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a deployment that cannot answer is listed as not installed
            return []

    described: dict[str, CapabilityInfo] = {}
    for entries in await asyncio.gather(*(ask(client) for _, client in ctx.clients.deployed())):
        for entry in entries:
            described[entry.capability] = entry
    if "translation" not in described and ctx.translation_not_installed:
        described["translation"] = translation_not_installed()
    if "llm" not in described and ctx.answers_extractively and ctx.clients.search is not None:
        # the extractive answerer runs in the Search deployment: without it nothing answers
        embedder = described.get("embeddings") or described.get("knowledge_base_search")
        described["llm"] = extractive_answerer(embedder.model if embedder else None)
    listed = [
        described.get(capability)
        or CapabilityInfo(capability=capability, installed=False, note="Its deployment is not running in this service.")
        for capability in CAPABILITIES
    ]
    listed += [info for name, info in described.items() if name not in CAPABILITIES]
    return ModelsListing(capabilities=listed)

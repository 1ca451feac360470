"""Version metadata, health probes and the models listing."""

from __future__ import annotations

import asyncio
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from serve_app import RELEASE_DATE, RELEASE_NAME, __version__
from contracts.capabilities import CapabilityInfo
from contracts.handles import DeploymentClient
from serve_app.context import AppContext

# Capabilities and which deployment describes them; a missing deployment is reported as not installed.
CAPABILITIES = {
    "entity_recognition": "text",
    "sentiment_analysis": "text",
    "intent_classification": "text",
    "language_identification": "text",
    "embeddings": "embeddings",
    "translation": "translation",
    "knowledge_base_search": "knowledge",
    "transcription": "transcription",
    "batch_transcription": "batch",
}


@lru_cache
def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, text=True,
                             capture_output=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def metadata(ctx: AppContext) -> dict[str, str]:
    return {
        "version": __version__,
        "git_commit": ctx.settings.git_commit or _git_commit(),
        "release_name": ctx.settings.release_name or RELEASE_NAME,
        "release_date": RELEASE_DATE,
    }


async def health(ctx: AppContext, timeout: float = 5.0) -> dict[str, Any]:
    async def probe(name: str, client: DeploymentClient) -> dict[str, Any]:
        try:
            await client.ping(timeout)
            return {"name": name, "healthy": True}
        except asyncio.TimeoutError:
            return {"name": name, "healthy": False, "detail": f"no answer within {timeout:.0f} s"}
        except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
            return {"name": name, "healthy": False, "detail": type(exc).__name__}

    deployments = [{"name": "database", **await _db_health(ctx)}]
    deployments += await asyncio.gather(*(probe(name, client) for name, client in ctx.clients.deployed()))
    ok = all(d["healthy"] for d in deployments)
    return {"status": "ok" if ok else "degraded", "deployments": deployments}


_db_checked: dict[str, tuple[float, dict[str, Any]]] = {}


async def _db_health(ctx: AppContext, max_age: float = 1.0) -> dict[str, Any]:
    """SELECT 1 at most once a second (probes can be frequent); off the event loop."""
    import time

    import anyio
    from sqlalchemy import text

    cached = _db_checked.get(ctx.db.url)
    if cached and time.monotonic() - cached[0] < max_age:
        return cached[1]

    def check() -> dict[str, Any]:
        try:
            with ctx.db.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return {"healthy": True}
        except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
            return {"healthy": False, "detail": type(exc).__name__}

    result = await anyio.to_thread.run_sync(check)
    _db_checked[ctx.db.url] = (time.monotonic(), result)
    return result


async def models(ctx: AppContext) -> dict[str, Any]:
    """Ask every deployment what it really has loaded; capabilities without a deployment are not installed."""
    described: dict[str, CapabilityInfo] = {}

    async def ask(client: DeploymentClient) -> list[CapabilityInfo]:
        try:
            return await client.describe(10.0)
        except Exception:  # noqa: BLE001 - a deployment that cannot answer is listed as not installed
            return []

    for entries in await asyncio.gather(*(ask(client) for _, client in ctx.clients.deployed())):
        for entry in entries:
            described[entry.capability] = entry
    out = [described.get(capability) or CapabilityInfo(
        capability=capability, installed=False, note="Its deployment is not running in this service.")
        for capability in CAPABILITIES]
    out += [info for name, info in described.items() if name not in CAPABILITIES]
    return {"capabilities": out}

"""Live API client secrets: minted with an API token, short-lived, single use, stored only as a SHA-256 hash.

A browser or phone must never hold a long-lived API token, and a WebSocket handshake cannot carry a header from a
browser. So a backend mints a client secret with its token (``POST /v1/realtime/client_secrets``) and hands only
that to the client, which presents it once, in the WebSocket subprotocols of ``/v1/realtime``. The secret is bound
to the minting token (its customer and project, whom the session is metered to) and to the session configuration
it was minted with; it opens one session, within ``speech.realtime_secret_seconds`` of minting.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, delete, select, update

from persistence.models import ApiToken, RealtimeClientSecret, utcnow
from persistence.session import Database
from serve_app.tokens import Principal, hash_token

SECRET_PREFIX = "ek_"  # an ephemeral key, as OpenAI's Realtime API names its client secrets


@dataclass(frozen=True)
class OpenedSecret:
    """A consumed secret: who minted it and the session it opens."""

    principal: Principal
    session: dict[str, Any]


def unix_seconds(moment: datetime) -> int:
    """A naive UTC timestamp (how the database stores time) as Unix seconds."""
    return int(moment.replace(tzinfo=UTC).timestamp())


def mint_secret(db: Database, principal: Principal, session: dict[str, Any], lifetime_s: float) -> tuple[str, datetime]:
    """A new secret for ``session``, and when it expires. Secrets that have expired are deleted on the way (they
    can open nothing any more)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    expires_at = now + timedelta(seconds=lifetime_s)
    with db.session() as s:
        s.execute(delete(RealtimeClientSecret).where(RealtimeClientSecret.expires_at < now))
        s.add(
            RealtimeClientSecret(
                secret_hash=hash_token(secret),
                token_id=principal.token_id,
                customer_id=principal.customer_id,
                project_id=principal.project_id,
                session=session,
                created_at=now,
                expires_at=expires_at,
            )
        )
    return secret, expires_at


def consume_secret(db: Database, secret: str) -> OpenedSecret | None:
    """Use ``secret`` up: its owner and session, or None when it is unknown, expired, already used, or its token
    was revoked since. One conditional UPDATE marks it used, so of two connections that present the same secret at
    once exactly one gets it (SQLite serialises writers; PostgreSQL re-checks ``used_at`` after the row lock)."""
    if not secret or len(secret) > 256:
        return None
    digest = hash_token(secret)
    now = utcnow()
    table = RealtimeClientSecret
    with db.session() as s:
        claimed = s.execute(
            update(table)
            .where(table.secret_hash == digest, table.used_at.is_(None), table.expires_at > now)
            .values(used_at=now)
        )
        if not isinstance(claimed, CursorResult) or claimed.rowcount != 1:
            return None
        row = s.execute(
            select(table, ApiToken).join(ApiToken, ApiToken.id == table.token_id).where(table.secret_hash == digest)
        ).one_or_none()
        if row is None or row[1].revoked_at is not None:
            return None
        minted, token = row
        principal = Principal(token.id, minted.customer_id, minted.project_id, token.webhook_secret)
        return OpenedSecret(principal, dict(minted.session))

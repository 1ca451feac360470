"""API tokens: random, shown once, stored only as a SHA-256 hash, each bound to a customer and project."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from persistence.models import ApiToken, Customer, Project, utcnow
from persistence.session import Database

TOKEN_PREFIX = "khk_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the ids every record they create carries."""

    token_id: int
    customer_id: int
    project_id: int
    webhook_secret: str


@dataclass(frozen=True)
class TokenInfo:
    id: int
    prefix: str
    name: str
    customer: str
    project: str
    customer_id: int
    project_id: int
    created_at: datetime
    revoked_at: datetime | None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(db: Database, customer: str, project: str = "default", name: str = "") -> tuple[str, TokenInfo]:
    """Create (customer, project if new and) a token. Returns the plaintext token, which is never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.session() as s:
        cust = s.scalar(select(Customer).where(Customer.name == customer))
        if cust is None:
            cust = Customer(name=customer)
            s.add(cust)
            s.flush()
        proj = s.scalar(select(Project).where(Project.customer_id == cust.id, Project.name == project))
        if proj is None:
            proj = Project(customer_id=cust.id, name=project)
            s.add(proj)
            s.flush()
        row = ApiToken(
            token_hash=hash_token(token),
            prefix=token[: len(TOKEN_PREFIX) + 6],
            name=name,
            customer_id=cust.id,
            project_id=proj.id,
            webhook_secret=secrets.token_hex(32),
        )
        s.add(row)
        s.flush()
        info = TokenInfo(row.id, row.prefix, name, cust.name, proj.name, cust.id, proj.id, row.created_at, None)
    return token, info


def list_tokens(db: Database, include_revoked: bool = False) -> list[TokenInfo]:
    with db.session() as s:
        stmt = (
            select(ApiToken, Customer.name, Project.name)
            .join(Customer, Customer.id == ApiToken.customer_id)
            .join(Project, Project.id == ApiToken.project_id)
            .order_by(ApiToken.id)
        )
        out = []
        for tok, cust_name, proj_name in s.execute(stmt):
            if tok.revoked_at is not None and not include_revoked:
                continue
            out.append(
                TokenInfo(
                    tok.id,
                    tok.prefix,
                    tok.name,
                    cust_name,
                    proj_name,
                    tok.customer_id,
                    tok.project_id,
                    tok.created_at,
                    tok.revoked_at,
                )
            )
        return out


def revoke_token(db: Database, ident: str) -> bool:
    """Revoke by numeric id, by the listed prefix or by the full token. True if one was revoked."""
    with db.session() as s:
        if ident.isdigit():
            row = s.get(ApiToken, int(ident))
        elif ident.startswith(TOKEN_PREFIX) and len(ident) > 20:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(ident)))
        else:
            rows = s.scalars(select(ApiToken).where(ApiToken.prefix == ident)).all()
            row = rows[0] if len(rows) == 1 else None
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = utcnow()
        return True


def webhook_secret_for(db: Database, token_id: int) -> str | None:
    with db.session() as s:
        row = s.get(ApiToken, token_id)
        return row.webhook_secret if row else None


class TokenVerifier:
    """Checks tokens against the database, with a short positive cache to keep the hot path cheap."""

    def __init__(self, db: Database, cache_seconds: float = 30.0) -> None:
        self.db = db
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def cached(self, token: str) -> Principal | None:
        digest = hash_token(token)
        hit = self._cache.get(digest)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        return None

    def verify(self, token: str) -> Principal | None:
        if not token or len(token) > 256:
            return None
        digest = hash_token(token)
        hit = self._cache.get(digest)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        with self.db.session() as s:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            if row is None or row.revoked_at is not None:
                return None
            if not hmac.compare_digest(row.token_hash, digest):
                return None
            principal = Principal(row.id, row.customer_id, row.project_id, row.webhook_secret)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (time.monotonic() + self.cache_seconds, principal)
        return principal

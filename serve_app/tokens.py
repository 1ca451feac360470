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
from sqlalchemy.orm import Session

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


LIMIT_FIELDS = ("requests_per_minute", "audio_seconds_per_day", "live_sessions", "concurrent_share")


@dataclass(frozen=True)
class CustomerLimits:
    """A customer's own limits (None: the operator's default, ``KHULUMA_ADMISSION_*``; 0: unlimited)."""

    customer_id: int
    customer: str
    requests_per_minute: int | None = None
    audio_seconds_per_day: int | None = None
    live_sessions: int | None = None
    concurrent_share: int | None = None  # percent of a server's capacity for one kind of work


def create_token(
    db: Database, customer: str, project: str = "default", name: str = "", limits: dict[str, int | None] | None = None
) -> tuple[str, TokenInfo]:
    """Create (customer, project if new and) a token. Returns the plaintext token, which is never stored.
    ``limits`` (keys of :data:`LIMIT_FIELDS`) are set on the customer: they belong to the customer, not the token."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.session() as s:
        cust = s.scalar(select(Customer).where(Customer.name == customer))
        if cust is None:
            cust = Customer(name=customer)
            s.add(cust)
            s.flush()
        _apply_limits(cust, limits or {})
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


def _apply_limits(customer: Customer, limits: dict[str, int | None]) -> None:
    for field, value in limits.items():
        if field not in LIMIT_FIELDS:
            raise ValueError(f"unknown limit {field!r}; known: {', '.join(LIMIT_FIELDS)}")
        if value is not None and value < 0:
            raise ValueError(f"{field} must be 0 (unlimited) or more")
        if field == "concurrent_share" and value is not None and value > 100:
            raise ValueError("concurrent_share is a percentage: 0 (no cap of its own) to 100")
        setattr(customer, field, value)


def _find_customer(s: Session, ident: str) -> Customer | None:
    """By a token's numeric id, its listed prefix or the token itself (its customer), else by customer name."""
    if ident.isdigit():
        token = s.get(ApiToken, int(ident))
    elif ident.startswith(TOKEN_PREFIX) and len(ident) > 20:
        token = s.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(ident)))
    elif ident.startswith(TOKEN_PREFIX):
        tokens = s.scalars(select(ApiToken).where(ApiToken.prefix == ident)).all()
        token = tokens[0] if len(tokens) == 1 else None
    else:
        return s.scalar(select(Customer).where(Customer.name == ident))
    return s.get(Customer, token.customer_id) if token is not None else None


def customer_limits(db: Database, ident: str, changes: dict[str, int | None] | None = None) -> CustomerLimits | None:
    """The limits of the customer named by ``ident`` (a token id, prefix or token, or a customer name), after
    applying ``changes`` (a value None resets that limit to the operator's default). None: no such customer."""
    with db.session() as s:
        customer = _find_customer(s, ident)
        if customer is None:
            return None
        _apply_limits(customer, changes or {})
        return CustomerLimits(customer.id, customer.name, *(getattr(customer, name) for name in LIMIT_FIELDS))


def webhook_secret_for(db: Database, token_id: int) -> str | None:
    with db.session() as s:
        row = s.get(ApiToken, token_id)
        return row.webhook_secret if row else None


class TokenVerifier:
    """Checks tokens against the database once per token, not once per request: a verified token is trusted for
    ``cache_seconds`` (then asked again), at most ``max_entries`` of them, the oldest verified forgotten first.

    A token revoked in the database (``khuluma token revoke``, another process) is refused by every replica at most
    ``cache_seconds`` after its revocation; one revoked through :meth:`revoke` is refused by this verifier at once.
    Unknown and revoked tokens are never cached: each costs a database read (admission's requests per minute bounds
    how many a client sends)."""

    def __init__(self, db: Database, cache_seconds: float = 30.0, max_entries: int = 10_000) -> None:
        self.db = db
        self.cache_seconds = cache_seconds
        self.max_entries = max(1, max_entries)
        self._cache: dict[str, tuple[float, Principal]] = {}  # digest -> (trusted until, principal), oldest first
        self._lock = threading.Lock()

    def cached(self, token: str) -> Principal | None:
        hit = self._cache.get(hash_token(token))
        if hit and hit[0] > time.monotonic():
            return hit[1]
        return None

    def known(self, token: str) -> Principal | None:
        """The principal this replica last verified for ``token``, even past the cache time: who is asking, for a
        fair share before authentication (never to authenticate: :meth:`cached` and :meth:`verify` do that)."""
        hit = self._cache.get(hash_token(token))
        return hit[1] if hit else None

    def verify(self, token: str) -> Principal | None:
        if not token or len(token) > 256:
            return None
        digest = hash_token(token)
        hit = self._cache.get(digest)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        with self.db.session() as s:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            principal = None
            if row is not None and row.revoked_at is None and hmac.compare_digest(row.token_hash, digest):
                principal = Principal(row.id, row.customer_id, row.project_id, row.webhook_secret)
        with self._lock:
            self._cache.pop(digest, None)  # re-inserted last (the newest), or gone for a revoked token
            if principal is not None:
                while len(self._cache) >= self.max_entries:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[digest] = (time.monotonic() + self.cache_seconds, principal)
        return principal

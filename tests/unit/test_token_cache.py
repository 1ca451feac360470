"""The token verifier's cache: a token is checked against the database once per ``token_cache_seconds``, at most
``token_cache_size`` tokens are trusted at once, and a revoked token is refused within the stated time."""

from __future__ import annotations

import time

from persistence.session import Database
from serve_app.tokens import TokenVerifier, create_token, revoke_token

TTL = 0.3  # short, so the test waits little


class CountingDatabase:
    """The database, counting the sessions opened (each is one verification that asked it)."""

    def __init__(self, db: Database) -> None:
        self.db, self.sessions = db, 0

    def session(self):
        self.sessions += 1
        return self.db.session()


def test_a_token_is_verified_once_per_period_not_once_per_request(db: Database) -> None:
    token, _ = create_token(db, "cache-once")
    counting = CountingDatabase(db)
    verifier = TokenVerifier(counting, cache_seconds=TTL)  # type: ignore[arg-type]
    first = verifier.verify(token)
    assert first is not None
    for _ in range(50):
        assert verifier.cached(token) == first and verifier.verify(token) == first
    assert counting.sessions == 1
    time.sleep(TTL + 0.05)
    assert verifier.cached(token) is None  # past its period: asked again
    assert verifier.verify(token) == first and counting.sessions == 2


def test_a_token_revoked_elsewhere_is_refused_within_the_cache_period(db: Database) -> None:
    """``khuluma token revoke`` (another process) reaches the replicas through the database only."""
    token, info = create_token(db, "cache-revoked")
    verifier = TokenVerifier(db, cache_seconds=TTL)
    assert verifier.verify(token) is not None
    revoked_at = time.monotonic()
    assert revoke_token(db, str(info.id))
    while verifier.verify(token) is not None:
        assert time.monotonic() - revoked_at <= TTL + 0.05, "still accepted past token_cache_seconds"
        time.sleep(0.02)
    assert time.monotonic() - revoked_at <= TTL + 0.05
    assert verifier.cached(token) is None and verifier.known(token) is None  # forgotten, not kept as known


def test_the_cache_keeps_at_most_its_size_forgetting_the_oldest(db: Database) -> None:
    tokens = [create_token(db, f"cache-size-{i}")[0] for i in range(3)]
    verifier = TokenVerifier(db, cache_seconds=3600, max_entries=2)
    for token in tokens:
        assert verifier.verify(token) is not None
    assert len(verifier._cache) == 2
    assert verifier.cached(tokens[0]) is None
    assert verifier.cached(tokens[1]) is not None and verifier.cached(tokens[2]) is not None


def test_the_app_refuses_a_revoked_token_within_the_stated_time(local_app, db: Database) -> None:
    client = local_app(token_cache_seconds=TTL)
    token, info = create_token(db, "cache-app")
    headers = {"X-CLIENT-TOKEN": token}
    assert client.get("/api/v2alpha/transcribe/batch", headers=headers).status_code == 200
    assert revoke_token(db, str(info.id))
    deadline = time.monotonic() + TTL + 0.05
    while (status := client.get("/api/v2alpha/transcribe/batch", headers=headers).status_code) == 200:
        assert time.monotonic() < deadline, "still accepted past token_cache_seconds"
        time.sleep(0.02)
    assert status == 401

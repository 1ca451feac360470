"""Engine/session factory and schema migration (Alembic) for SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

_MIGRATIONS = Path(__file__).parent / "migrations"
_lock = threading.Lock()
_engines: dict[str, Engine] = {}


def make_engine(url: str) -> Engine:
    with _lock:
        if url in _engines:
            return _engines[url]
        if url.startswith("sqlite"):
            if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
                Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA busy_timeout=30000")
                cur.close()
        else:
            engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)
        _engines[url] = engine
        return engine


def migrate(url: str) -> None:
    """Bring the schema to the newest revision (idempotent; safe to call at every start)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    engine = make_engine(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class Database:
    """A migrated database and its session factory."""

    def __init__(self, url: str, *, run_migrations: bool = True) -> None:
        self.url = url
        self.engine = make_engine(url)
        if run_migrations:
            migrate(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed when the block ends, rolled back on any error (nothing half-written)."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

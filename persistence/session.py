"""Engine/session factory and schema migration (Alembic) for SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.orm import Session, sessionmaker

_MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration's revision (migrations/versions/): replicas compare the database with it by one query instead
# of importing Alembic, which costs each process that holds a database about 9 MiB for the service's lifetime.
# tests/unit/test_schema_revision.py keeps it equal to Alembic's head.
SCHEMA_REVISION = "0006"
# Alembic's table of the revision a database is at (its default name: migrations/env.py keeps it).
_VERSION_TABLE = "alembic_version"
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
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
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


def _alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str) -> None:
    """Bring the schema to the newest revision (idempotent). Run once before the app starts (``khuluma serve``,
    ``khuluma db migrate``), never in replicas: many replicas migrating at once race each other."""
    from alembic import command

    cfg = _alembic_config(url)
    with make_engine(url).begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class SchemaOutOfDate(RuntimeError):
    """The database is not at the code's newest migration."""


class Database:
    """A database and its session factory (the schema is migrated beforehand: :func:`migrate`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def migrated(cls, url: str) -> Database:
        """Migrate, then open (the CLI, the tests and the benchmarks: whoever starts from nothing)."""
        migrate(url)
        return cls(url)

    def require_current_schema(self) -> None:
        """Fail fast, with one line that says what to run, when the schema is not the code's."""
        current = self.schema_revision()
        if current != SCHEMA_REVISION:
            raise SchemaOutOfDate(
                f"The database schema is at revision {current or 'none'} but this code needs {SCHEMA_REVISION}: run "
                f"`khuluma db migrate` (khuluma serve does it before it starts)."
            )

    def schema_revision(self) -> str | None:
        """The migration the database is at; None for a database never migrated."""
        with self.engine.connect() as conn:
            if not inspect(conn).has_table(_VERSION_TABLE):
                return None
            return conn.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalar()

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

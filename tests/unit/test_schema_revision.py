"""The schema check every replica runs at start: against the newest migration, without Alembic in the process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from persistence.session import SCHEMA_REVISION, Database, SchemaOutOfDate, _alembic_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_code_s_revision_is_alembic_s_only_head():
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(_alembic_config("sqlite://")).get_heads()
    assert heads == [SCHEMA_REVISION]  # a new migration moves SCHEMA_REVISION with it


def test_a_database_passes_only_at_the_code_s_revision(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'khuluma.db'}"
    db = Database(url)
    assert db.schema_revision() is None
    with pytest.raises(SchemaOutOfDate, match=r"at revision none .* needs " + SCHEMA_REVISION):
        db.require_current_schema()

    Database.migrated(url).require_current_schema()
    assert db.schema_revision() == SCHEMA_REVISION

    with db.engine.begin() as conn:  # one migration behind, as after an upgrade nobody migrated for
        conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
    with pytest.raises(SchemaOutOfDate, match=r"at revision 0005 .*khuluma db migrate"):
        db.require_current_schema()


def test_the_check_imports_no_alembic(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'khuluma.db'}"
    Database.migrated(url)
    check = (
        "import sys\n"
        "from persistence.session import Database\n"
        f"Database({url!r}).require_current_schema()\n"
        "print(sorted(m for m in sys.modules if m == 'alembic' or m.startswith('alembic.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

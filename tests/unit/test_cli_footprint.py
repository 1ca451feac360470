"""`khuluma serve` lives as long as the service (it is the Ray driver), so its process imports only what serving
needs; every other command still works through the whole command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
sys.path.insert(0, {root!r})
sys.argv = ["khuluma", *{args!r}]
from khuluma.cli import main
try:
    main()
except SystemExit as done:
    code = done.code
heavy = sorted(m for m in ("sqlalchemy", "alembic", "httpx", "soundfile", "persistence.models") if m in sys.modules)
print(json.dumps({{"code": code, "heavy": heavy}}))
"""


def probe(*args: str) -> dict:
    code = PROBE.format(root=str(ROOT), args=list(args))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_khuluma_serve_imports_no_orm_and_no_client() -> None:
    serving = probe("serve", "--help")
    assert serving["code"] == 0 and serving["heavy"] == []
    other = probe("token", "--help")  # a command that needs the ORM still gets it
    assert other["code"] == 0 and "sqlalchemy" in other["heavy"]


def test_the_whole_command_line_is_still_there() -> None:
    from typer.testing import CliRunner

    from khuluma.cli import app

    shown = CliRunner().invoke(app, ["--help"]).output
    assert all(name in shown for name in ("serve", "token", "models", "kb", "batch", "stream", "db"))


def test_the_serving_process_holds_no_serve_client() -> None:
    """What `khuluma serve` imports for itself (its GPU check reads the deployments' options, the graceful stop's
    keys): Serve is started and deployed to in a one-off Ray task, so the process holds no Serve client while it
    waits for a signal (it imports one when the stop begins)."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import khuluma.cli.serve, cluster.graceful_stop\n"
        "from khuluma.app import check_gpus, deployment_options\n"
        "check_gpus(deployment_options({}), 0.0)\n"
        "print(sorted(m for m in ('ray.serve', 'fastapi', 'serve_app', 'deployments') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"

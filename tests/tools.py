"""The outside programs some tests need (espeak-ng, sox, chromium, PostgreSQL's server binaries, unshare), checked
in one place: :func:`require_tool`.

Where a tool is missing, the test that needs it (or the fixture that runs it) is skipped with what to install. With
``CI=true`` in the environment (CI sets it; ``.ci/run`` exports it too) it FAILS instead: a CI machine that lost a
tool must not go green by skipping every test that would have used it. Call it where the tool is really used, so
that the tests of the same module that need no such tool still run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# what installs each tool (`./scripts/setup.sh --test` does all of it when run as root)
INSTALL = {
    "espeak-ng": "apt-get install espeak-ng",
    "sox": "apt-get install sox libsox-fmt-all",
    "chromium": "apt-get install chromium",
    "initdb": "apt-get install postgresql (the PostgreSQL server binaries)",
    "unshare": "apt-get install util-linux",
}


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``, or ``1``/``yes``): missing tools then fail the run."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server binaries (``initdb``, ``pg_ctl``): Debian keeps them off PATH."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def find_tool(name: str) -> str | None:
    """The path of ``name``, or None."""
    if name == "initdb":
        folder = postgres_bin()
        return str(folder / "initdb") if folder else None
    return shutil.which(name)


def require_tool(name: str) -> str:
    """The path of the tool ``name``; where it is missing, skip the calling test (or fixture), or fail it when
    :func:`in_ci`."""
    path = find_tool(name)
    if path is not None:
        return path
    reason = f"{name} is not installed ({INSTALL.get(name, 'install it')}; ./scripts/setup.sh --test does, as root)"
    if in_ci():
        pytest.fail(f"{reason}. CI=true: a missing tool fails the run instead of skipping its tests", pytrace=False)
    pytest.skip(reason)


def khuluma_models(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``khuluma models ARGS`` in a subprocess of its own, on ``data_dir`` (its registry), with ``env`` added."""
    environ = {
        "KHULUMA_DATA_DIR": str(data_dir),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(data_dir),
        "COLUMNS": "250",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "khuluma.cli", "models", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )

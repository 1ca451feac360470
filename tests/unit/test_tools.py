"""tests/tools.py: a missing outside tool skips the test that needs it, and fails it under CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import in_ci, require_tool

ROOT = Path(__file__).resolve().parents[2]
MISSING = "khuluma-no-such-tool"  # a made-up name: on no machine's PATH


def test_a_present_tool_gives_its_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert Path(require_tool("sh")).name == "sh"


def test_a_missing_tool_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{MISSING} is not installed"):
        require_tool(MISSING)


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_a_missing_tool_fails_under_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match=f"{MISSING} is not installed.*CI=true"):
        require_tool(MISSING)


@pytest.mark.parametrize("value", ["", "false", "0"])
def test_other_ci_values_skip(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception):
        require_tool(MISSING)


def test_a_whole_run_skips_locally_and_fails_in_ci(tmp_path: Path) -> None:
    """The outcome a runner reports: a run whose only test needs a missing tool passes (1 skipped) without CI and
    fails (exit status 1) with CI=true, whether the tool is asked for by the test or by its fixture."""
    (tmp_path / "test_needs_a_tool.py").write_text(
        "import pytest\n"
        "from tests.tools import require_tool\n\n"
        "@pytest.fixture()\n"
        f"def tool():\n    return require_tool({MISSING!r})\n\n"
        "def test_in_the_test():\n"
        f"    require_tool({MISSING!r})\n\n"
        "def test_in_a_fixture(tool):\n"
        "    pass\n"
    )

    def run(ci: str | None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(ROOT)}
        if ci is not None:
            env["CI"] = ci
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-rs", str(tmp_path)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    local = run(None)
    assert local.returncode == 0 and "2 skipped" in local.stdout, local.stdout
    ci = run("true")
    assert ci.returncode == 1 and "1 failed" in ci.stdout and "1 error" in ci.stdout, ci.stdout
    assert f"{MISSING} is not installed" in ci.stdout and "CI=true" in ci.stdout

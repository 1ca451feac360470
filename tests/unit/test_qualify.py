"""``khuluma qualify``: word error rate, threshold evaluation, the table and the exit code without a service, then
one whole run against the ingress (Transcription in Serve's local testing mode) under uvicorn on a local port."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from contracts.wer import word_error_rate, word_errors
from khuluma.app import build_local
from khuluma.cli import app
from khuluma.cli.qualification import Outcome, Status, Thresholds, at_most, exit_code, summary, table
from tests.conftest import client_for, serving

WIDE = {"COLUMNS": "220"}  # the table on one line per check


def test_word_error_rate() -> None:
    assert word_error_rate("Hello, World!", "hello world") == 0.0
    assert word_error_rate("the cat sat", "the bat sat down") == pytest.approx(2 / 3)
    assert word_errors("l'école est fermée", "L'école est fermée.") == (0, 3)
    assert word_error_rate("", "") == 0.0 and word_error_rate("", "noise") == 1.0
    assert word_error_rate("one two", "") == 1.0


def test_thresholds_decide_pass_and_fail() -> None:
    assert at_most("performance", "sync time", 14.9, 15.0).status is Status.PASS
    assert at_most("performance", "sync time", 15.0, 15.0).status is Status.PASS  # at most: the limit passes
    late = at_most("performance", "sync time", 15.1, 15.0)
    assert late.status is Status.FAIL and late.measured == "15.10 s" and late.threshold == "<= 15 s"
    unmeasured = at_most("performance", "live RTF", None, 1.5, "", "stream refused")
    assert unmeasured.status is Status.FAIL and unmeasured.detail == "stream refused"
    assert at_most("accuracy", "sync WER", 0.25, Thresholds().max_wer, "").measured == "0.25"


def test_exit_code_and_table() -> None:
    passing = [
        Outcome("sanity", "health", Status.PASS, "0.01 s", "<= 1 s"),
        Outcome("sanity", "translate", Status.NOT_INSTALLED, detail="no translation model"),
    ]
    assert exit_code(passing) == 0  # a capability without its model is not a failure
    assert "QUALIFIED" in summary(passing) and "1 not installed" in summary(passing)
    failing = [*passing, Outcome("performance", "live RTF", Status.FAIL, "2.00", "<= 1.5")]
    assert exit_code(failing) == 1 and "NOT QUALIFIED" in summary(failing)
    assert exit_code([]) == 1  # nothing checked qualifies nothing
    console = Console(width=200, record=True)
    console.print(table(failing))
    shown = console.export_text()
    assert all(word in shown for word in ("health", "NOT INSTALLED", "FAIL", "live RTF", "<= 1.5"))
    assert shown.index("sanity") < shown.index("performance")


def test_audio_is_required_without_espeak(monkeypatch) -> None:
    monkeypatch.setattr("shutil.which", lambda _: None)
    result = CliRunner().invoke(app, ["qualify", "--token", "t", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "--audio" in result.output


def test_a_whole_run_against_the_local_service(settings, make_token, tmp_path: Path) -> None:
    client = client_for(settings, build_local(settings, ["speech"]))
    token = make_token("qualify-co", "install")
    with serving(client) as url:
        # the mechanism, not this machine's speed (a shared 2-core test machine): generous time limits
        generous = ["--max-sync-s", "120", "--max-first-delta-s", "60", "--max-live-rtf", "30"]
        result = CliRunner().invoke(app, ["qualify", "--url", url, "--token", token, *generous], env=WIDE)
        wrong = CliRunner().invoke(app, ["qualify", "--url", url, "--token", "not-a-token"], env=WIDE)
    shown = result.output
    assert result.exit_code == 0, shown
    for check in ("health", "translate", "sync WER", "sync time", "live first text", "live RTF"):
        assert re.search(rf"{check}\s.*(PASS|NOT INSTALLED)", shown), (check, shown)
    assert "NOT INSTALLED" in shown and "QUALIFIED" in shown
    assert wrong.exit_code == 1 and "401" in wrong.output

"""The terminal client commands (``khuluma sentiment|entities|language|transcribe|kb``) against the real Serve app,
as a user runs them: the token from the environment, tables by default, the service's JSON with ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from khuluma.cli import app
from scripts.eval_wer import word_errors
from tests.speechdata import espeak

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(serve_url: str, make_token) -> dict[str, str]:
    return {"KHULUMA_URL": serve_url, "KHULUMA_TOKEN": make_token("cli-user", "terminal")}


def khuluma(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_text_commands(env: dict[str, str]) -> None:
    code, stdout, _ = khuluma(env, "sentiment", "I love Durban. The traffic is terrible!", "--json")
    sentences = json.loads(stdout)["Sentiments"]
    assert code == 0 and len(sentences) == 2 and all(s["sentiment"] for s in sentences)
    code, stdout, _ = khuluma(env, "sentiment", "I love Durban. The traffic is terrible!")
    assert code == 0 and "I love Durban" in stdout and "traffic is terrible" in stdout  # a row each

    code, stdout, _ = khuluma(env, "entities", "Thandi Nkosi works for Standard Bank in Johannesburg.")
    assert code == 0 and "Johannesburg" in stdout

    code, stdout, _ = khuluma(env, "language", "Ngiyabonga kakhulu ngosizo lwakho namuhla ekuseni.", "--json")
    assert code == 0 and json.loads(stdout)["language"] == "zul"


def test_knowledge_base_commands(env: dict[str, str], tmp_path: Path) -> None:
    code, stdout, _ = khuluma(env, "kb", "create", "clinics")
    assert code == 0
    kb_id = stdout.strip()
    notice = tmp_path / "clinic.txt"
    notice.write_text(
        "Soshanguve Block X Clinic is open from Monday to Friday, 07:30 to 19:00.\n\n"
        "Refuse in Ward 45 is collected every Wednesday before 06:30.",
        encoding="utf-8",
    )
    code, stdout, _ = khuluma(env, "kb", "upload", kb_id, str(notice), "--json")
    assert code == 0 and json.loads(stdout)[0]["filename"] == "clinic.txt"
    code, stdout, _ = khuluma(env, "kb", "query", kb_id, "When is refuse collected in Ward 45?", "--json")
    assert code == 0 and "Wednesday" in json.loads(stdout)["search_result"][0]["text"]
    code, stdout, _ = khuluma(env, "kb", "list")
    assert code == 0 and kb_id in stdout and "clinic.txt" in stdout
    code, _, _ = khuluma(env, "kb", "delete", kb_id)
    assert code == 0
    code, _, stderr = khuluma(env, "kb", "query", kb_id, "anything")  # gone: the service's 404, said plainly
    assert code == 1 and stderr.startswith("404:")


def test_transcribe_command_and_a_refused_token(env: dict[str, str], tmp_path: Path) -> None:
    said = "Thank you for calling, your payment has been received."
    wav = espeak(said, tmp_path / "call.wav")
    code, stdout, stderr = khuluma(env, "transcribe", str(wav), "--lang", "eng")
    errors, words = word_errors(said, stdout)
    assert code == 0 and errors / words <= 0.3, stdout
    assert "language eng" in stderr

    code, _, stderr = khuluma({**env, "KHULUMA_TOKEN": "kh_not-a-token"}, "sentiment", "Hello there.")
    assert code == 1 and stderr.startswith("401:")

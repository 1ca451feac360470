"""Unknown ``KHULUMA_*`` environment variables are reported at start, with the setting meant
(contracts/settings/variables.py): by ``khuluma serve`` on its console and by each replica in its log, once; they
never stop the service."""

from __future__ import annotations

import logging
import re
import subprocess
from pathlib import Path

import pytest

from contracts.settings import Settings, renamed_variable, variables
from contracts.settings.variables import (
    NOT_SETTINGS,
    RENAMED_VARIABLES,
    report_setting_warnings,
    setting_variables,
    setting_warnings,
    unknown_variables,
)
from deployments.common import configure_replica_logging

ROOT = Path(__file__).resolve().parents[2]


def test_the_names_come_from_the_model_tree() -> None:
    names = setting_variables()
    assert {"KHULUMA_DATA_DIR", "KHULUMA_DATABASE_URL", "KHULUMA_SPEECH_WHISPER_MODEL"} <= names
    assert "KHULUMA_S3_SECRET_KEY" in names
    assert "KHULUMA_SPEECH_UNSERVED_LANGUAGE" in names and "KHULUMA_WEBHOOKS_ALLOW_PRIVATE" in names
    assert "KHULUMA_SPEECH" in names  # a whole section, as JSON
    # a mapping is one variable (JSON), not one per key
    assert "KHULUMA_SPEECH_LANGUAGE_MODELS" in names and "KHULUMA_BATCH_TASK_RESOURCES" in names
    assert not any(name.startswith("KHULUMA_SPEECH_LANGUAGE_MODELS_") for name in names)
    assert not any(name.startswith(("KHULUMA_WHISPER", "KHULUMA_TRANSCRIPTION")) for name in names)  # one section
    for section in ("text", "embeddings", "translation", "search", "speech", "jobs", "batch"):
        for field in type(getattr(Settings(_env_file=None), section)).model_fields:
            assert f"KHULUMA_{section}_{field}".upper() in names


def test_a_renamed_setting_names_its_new_name() -> None:
    assert setting_warnings({"KHULUMA_WEBHOOK_ALLOW_PRIVATE": "true"}) == [
        "KHULUMA_WEBHOOK_ALLOW_PRIVATE is not a setting (renamed: KHULUMA_WEBHOOKS_ALLOW_PRIVATE)"
    ]
    assert setting_warnings({"KHULUMA_NER_MODEL": "/models/x"}) == [
        "KHULUMA_NER_MODEL is not a setting (renamed: KHULUMA_TEXT_NER_MODEL)"
    ]


def test_a_renamed_section_is_still_read_under_its_old_name_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``limits`` became ``admission``: its variables, its dotenv lines and a Serve config's ``limits:`` keep
    working, the new name wins where both are set, and each old name is reported with the name to use."""
    monkeypatch.setenv("KHULUMA_LIMITS_REQUESTS_PER_MINUTE", "7")
    monkeypatch.setenv("KHULUMA_LIMITS_TEXT_IN_FLIGHT", "3")
    monkeypatch.setenv("KHULUMA_ADMISSION_TEXT_IN_FLIGHT", "5")
    dotenv = tmp_path / ".env"
    dotenv.write_text("KHULUMA_LIMITS_LIVE_SESSIONS=2\n")
    settings = Settings(data_dir=tmp_path, _env_file=dotenv)
    assert (settings.admission.requests_per_minute, settings.admission.text_in_flight) == (7, 5)
    assert settings.admission.live_sessions == 2
    with caplog.at_level(logging.WARNING, logger="khuluma.settings"):
        configured = Settings(data_dir=tmp_path, _env_file=None, limits={"concurrent_share": 30})
        updated = settings.updated({"limits": {"max_wait_seconds": 2.5}})
    assert configured.admission.concurrent_share == 30 and updated.admission.max_wait_seconds == 2.5
    assert updated.admission.requests_per_minute == 7  # the rest of the section kept
    assert any("'limits' is now 'admission'" in r.getMessage() for r in caplog.records)
    assert setting_warnings({"KHULUMA_LIMITS_LIVE_SESSIONS": "4"}) == [
        "KHULUMA_LIMITS_LIVE_SESSIONS is an old name of KHULUMA_ADMISSION_LIVE_SESSIONS: still read as that; rename it"
    ]
    assert renamed_variable("khuluma_limits") == "khuluma_admission"
    assert renamed_variable("khuluma_limitsx") is None  # another name that starts alike


def test_whisper_and_transcription_are_read_into_the_one_speech_section(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``whisper`` and ``transcription`` joined ``speech`` (Whisper's fields prefixed ``whisper_``, one map of
    models per language): their variables, dotenv lines and a Serve config's sections keep working with a warning,
    and what the new names set wins."""
    monkeypatch.setenv("KHULUMA_WHISPER_MODEL", "/models/old")
    monkeypatch.setenv("KHULUMA_WHISPER_BEAM_SIZE", "2")
    monkeypatch.setenv("KHULUMA_SPEECH_WHISPER_BEAM_SIZE", "3")
    monkeypatch.setenv("KHULUMA_WHISPER_LANGUAGE_MODELS", '{"zul": "/models/zu-whisper", "sot": "/models/st"}')
    monkeypatch.setenv("KHULUMA_SPEECH_LANGUAGE_MODELS", '{"zul": "/models/zu-ctc"}')
    dotenv = tmp_path / ".env"
    dotenv.write_text("KHULUMA_TRANSCRIPTION_SYNC_TIMEOUT_SECONDS=42\n")
    with caplog.at_level(logging.WARNING, logger="khuluma.settings"):
        settings = Settings(data_dir=tmp_path, _env_file=dotenv)
        served = Settings(
            data_dir=tmp_path,
            _env_file=None,
            whisper={"device": "cuda", "language_models": {"xho": "/models/xh"}},
            transcription={"unserved_language": "warn"},
        )
        updated = settings.updated({"transcription": {"stream_idle_seconds": 9.0}})
    speech = settings.speech
    assert (speech.whisper_model, speech.whisper_beam_size, speech.sync_timeout_seconds) == ("/models/old", 3, 42)
    assert speech.language_models == {"zul": "/models/zu-ctc", "sot": "/models/st"}  # one map, the new one wins
    assert speech.whisper.model == "/models/old" and speech.whisper.beam_size == 3  # the Whisper family's view
    assert served.speech.whisper_device == "cuda" and served.speech.unserved_language == "warn"
    assert served.speech.language_models["xho"] == "/models/xh"
    assert updated.speech.stream_idle_seconds == 9.0 and updated.speech.sync_timeout_seconds == 42
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "'whisper' is now 'speech'" in said and "'transcription' is now 'speech'" in said
    assert setting_warnings({"KHULUMA_WHISPER_MODEL": "x", "KHULUMA_TRANSCRIPTION_WINDOW_SECONDS": "60"}) == [
        "KHULUMA_TRANSCRIPTION_WINDOW_SECONDS is an old name of KHULUMA_SPEECH_WINDOW_SECONDS: still read as that; "
        "rename it",
        "KHULUMA_WHISPER_MODEL is an old name of KHULUMA_SPEECH_WHISPER_MODEL: still read as that; rename it",
    ]
    assert setting_warnings({"KHULUMA_WHISPER_LANGUAGE_MODELS": "{}"}) == [
        "KHULUMA_WHISPER_LANGUAGE_MODELS is an old name of KHULUMA_SPEECH_LANGUAGE_MODELS: still read as that; "
        "rename it"
    ]
    assert "whisper" not in Settings.model_fields and "transcription" not in Settings.model_fields


def test_every_rename_leads_from_an_unknown_name_to_a_setting() -> None:
    names = setting_variables()
    assert all(old not in names and new in names for old, new in RENAMED_VARIABLES.items())


def test_a_misspelt_setting_names_the_nearest() -> None:
    assert setting_warnings({"KHULUMA_SPEECH_WHISPER_MODLE": "tiny", "khuluma_loglevel": "DEBUG"}) == [
        "KHULUMA_SPEECH_WHISPER_MODLE is not a setting (did you mean KHULUMA_SPEECH_WHISPER_MODEL?)",
        "khuluma_loglevel is not a setting (did you mean KHULUMA_LOG_LEVEL?)",
    ]
    # a key of a JSON mapping set as a variable of its own
    assert setting_warnings({"KHULUMA_SPEECH_LANGUAGE_MODELS_ZUL": "/m"}) == [
        "KHULUMA_SPEECH_LANGUAGE_MODELS_ZUL is not a setting (did you mean KHULUMA_SPEECH_LANGUAGE_MODELS?)"
    ]
    # nothing alike: no guess
    [line] = setting_warnings({"KHULUMA_QQQ": "1"})
    assert line.startswith("KHULUMA_QQQ is not a setting (no setting has a similar name")


def test_settings_and_the_project_s_other_variables_are_not_reported() -> None:
    environ = {
        "KHULUMA_DATA_DIR": "/d",
        "khuluma_port": "9000",  # read without regard to case, as the settings read it
        "KHULUMA_SPEECH_UNSERVED_LANGUAGE": "warn",
        "KHULUMA_SPEECH_LANGUAGE_MODELS": '{"zul": "/m"}',
        "KHULUMA_SPEECH_WHISPER_MODEL": "/models/whisper",
        "KHULUMA_S3": '{"bucket": "b"}',
        "KHULUMA_TOKEN": "khk_x",  # the client commands'
        "KHULUMA_BATCH_URI": "s3://b/batches/1/",  # exported by `khuluma batch env`
        "KHULUMA_SECRETS_FILE": "/etc/khuluma.secrets",
        "KHULUMA_PLAYGROUND_SCREENSHOTS": "/tmp/shots",
        "PATH": "/bin",
        "NOT_KHULUMA_X": "1",
    }
    assert unknown_variables(environ) == [] and setting_warnings(environ) == []


def test_unknown_variables_never_stop_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KHULUMA_NER_MODEL", "/models/old-name")
    monkeypatch.setenv("KHULUMA_BATCH_URL", "http://127.0.0.1:8000/api/v2alpha/transcribe/batch")  # a section's
    settings = Settings(data_dir=tmp_path, _env_file=None)
    assert settings.text.ner_model is None


def test_every_khuluma_name_the_project_mentions_is_known() -> None:
    """The allow-list and the renames keep up with the code and the docs: every KHULUMA_* name written anywhere in
    the repository is a setting, one of the project's other variables, or a renamed setting's or section's old
    name."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    mentioned: dict[str, str] = {}
    for file in files:
        path = ROOT / file
        if path.suffix not in {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".env", ""} or not path.is_file():
            continue
        for name in re.findall(r"\bKHULUMA_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")):
            mentioned.setdefault(name, file)
    made_up = {"KHULUMA_QQQ", "KHULUMA_SPEECH_WHISPER_MODLE", "KHULUMA_BATCH_URL", "KHULUMA_SPEECH_LANGUAGE_MODELS_ZUL"}
    unknown = {
        name: file
        for name, file in mentioned.items()
        if name not in setting_variables() | NOT_SETTINGS.keys() | RENAMED_VARIABLES.keys() | made_up
        and renamed_variable(name) not in setting_variables()
    }
    assert unknown == {}


def test_a_replica_logs_each_warning_once(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(variables, "_reported", set())
    monkeypatch.setenv("KHULUMA_WEBHOOK_ALLOW_PRIVATE", "true")
    with caplog.at_level(logging.WARNING, logger="khuluma.settings"):
        configure_replica_logging("TextAnalysis", settings)
        configure_replica_logging("Search", settings)  # a second replica in this process: said once
    said = [r.getMessage() for r in caplog.records if r.name == "khuluma.settings"]
    assert said == ["KHULUMA_WEBHOOK_ALLOW_PRIVATE is not a setting (renamed: KHULUMA_WEBHOOKS_ALLOW_PRIVATE)"]
    assert report_setting_warnings(print) == []


def test_khuluma_serve_prints_the_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The serve command prints each warning before it starts anything (here it stops before the migration)."""
    from typer.testing import CliRunner

    from khuluma.cli import app

    monkeypatch.setenv("KHULUMA_WEBHOOK_ALLOW_PRIVATE", "true")
    monkeypatch.setenv("KHULUMA_SPEECH_WHISPER_MODLE", "tiny")
    monkeypatch.setenv("KHULUMA_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("khuluma.cli.serve._migrate", _stop)
    result = CliRunner().invoke(app, ["serve", "--no-storage"])
    out = " ".join(result.output.split())  # the console wraps long lines
    assert "WARNING: KHULUMA_WEBHOOK_ALLOW_PRIVATE is not a setting (renamed: KHULUMA_WEBHOOKS_ALLOW_PRIVATE)" in out
    assert "WARNING: KHULUMA_SPEECH_WHISPER_MODLE is not a setting (did you mean KHULUMA_SPEECH_WHISPER_MODEL?)" in out


def _stop() -> None:
    raise SystemExit(3)

"""Serve's access log (one INFO line per request) is off in the shipped Serve config and stays the operator's
choice: ``KHULUMA_ACCESS_LOG`` overrides the config's ``logging_config.enable_access_log``."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.settings import Settings
from khuluma.cli.serve import load_serve_config, with_access_log

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_config_logs_no_line_per_request() -> None:
    assert load_serve_config(ROOT / "configs" / "serve.yaml")["logging_config"]["enable_access_log"] is False


@pytest.mark.parametrize("value,expected", [("true", True), ("false", False)])
def test_the_setting_overrides_the_config(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("KHULUMA_ACCESS_LOG", value)
    settings = Settings(_env_file=None)
    config = {"log_level": "WARNING", "enable_access_log": not expected}
    assert with_access_log(config, settings.access_log) == {"log_level": "WARNING", "enable_access_log": expected}
    assert with_access_log(None, settings.access_log) == {"enable_access_log": expected}


def test_unset_keeps_the_config() -> None:
    config = {"enable_access_log": False}
    assert Settings(_env_file=None).access_log is None
    assert with_access_log(config, None) is config

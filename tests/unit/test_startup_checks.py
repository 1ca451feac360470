"""Start-up checks (khuluma/checks.py): each missing dependency stops the deploy with one clear line, against
real endpoints (a port nothing listens on, an un-migrated database, the session's SeaweedFS)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contracts.settings import Settings
from khuluma.app import build_app
from khuluma.checks import StartupCheckFailed, check_chroma, check_database, check_object_storage
from scripts.bench._plain import free_port


def _one_line(exc: pytest.ExceptionInfo[StartupCheckFailed]) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 400
    return text


def test_a_database_that_is_not_migrated_or_not_there(tmp_path: Path) -> None:
    fresh = Settings(data_dir=tmp_path, _env_file=None)
    with pytest.raises(StartupCheckFailed) as exc:
        check_database(fresh)
    assert "khuluma db migrate" in _one_line(exc)
    down = fresh.updated({"database_url": f"postgresql+psycopg://khuluma@127.0.0.1:{free_port()}/khuluma"})
    start = time.monotonic()
    with pytest.raises(StartupCheckFailed) as exc:
        check_database(down)
    assert "unreachable" in _one_line(exc) and "KHULUMA_DATABASE_URL" in str(exc.value)
    assert "khuluma@" not in str(exc.value)  # no credentials in the message
    assert time.monotonic() - start < 15


def test_object_storage_unreachable_and_reachable(settings: Settings, seaweedfs: str) -> None:
    down = settings.updated({"s3": {"endpoint_url": f"http://127.0.0.1:{free_port()}"}})
    with pytest.raises(StartupCheckFailed) as exc:
        check_object_storage(down)
    assert "KHULUMA_S3_ENDPOINT_URL" in _one_line(exc)
    check_object_storage(settings.updated({"s3": {"endpoint_url": seaweedfs}}))  # the real one passes
    wrong_key = settings.updated({"s3": {"endpoint_url": seaweedfs, "access_key": "nobody", "secret_key": "wrong"}})
    with pytest.raises(StartupCheckFailed) as exc:
        check_object_storage(wrong_key)
    assert "KHULUMA_S3_ACCESS_KEY" in _one_line(exc)


def test_chroma_server_unreachable(settings: Settings) -> None:
    with pytest.raises(StartupCheckFailed) as exc:
        check_chroma(settings.updated({"search": {"chroma_url": f"http://127.0.0.1:{free_port()}"}}))
    assert "KHULUMA_SEARCH_CHROMA_URL" in _one_line(exc)
    check_chroma(settings)  # embedded store: nothing to reach


def test_the_app_builder_runs_them(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve deploy` and `serve run` build the app in the controller: a bad configuration stops there."""
    monkeypatch.setenv("KHULUMA_DATA_DIR", str(settings.data_dir))
    with pytest.raises(StartupCheckFailed) as exc:
        build_app({"settings": {"search": {"chroma_url": f"http://127.0.0.1:{free_port()}"}}})
    assert "Chroma server" in _one_line(exc)
    build_app({"capabilities": ["text"]})  # a good configuration builds


def test_capabilities_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match=r"Unknown capabilities \['speach'\]; known: .*speech"):
        build_app({"capabilities": ["speach"], "checks": False})  # a typo is refused, not silently deployed
    build_app({"capabilities": ["none"], "checks": False})  # the ingress alone (the Serve-overhead bench)

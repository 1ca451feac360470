"""Logging set-up, the same in the ingress, the replicas and the Ray tasks: one JSON object per line.

Why not ``logging.basicConfig``: inside a Serve replica, Serve replaces ``sys.stderr`` with a stream that re-logs
every line through the ``ray.serve`` logger at INFO, and that logger is filtered at the Serve config's
``log_level`` (WARNING): an application's ERROR line written there would be dropped, traceback and all. Here the
handler writes to the process's real standard error (``sys.__stderr__``), which Ray stores in the session's
``logs/worker-*.err`` files and forwards to the driver's console (``khuluma serve`` prints it).

Every line carries the request id when there is one (``X-Request-ID``; the same id Serve propagates from the
ingress to the model deployments), so a client's error message leads to every line of its request:
``grep <request id> /tmp/ray/session_latest/logs/*``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime

LEVEL_VARIABLE = "KHULUMA_LOG_LEVEL"  # documented with the settings (Settings.log_level)
# Libraries that log every HTTP call or model step at INFO: only their warnings are worth a line.
QUIET_LOGGERS = (
    "httpx",
    "httpcore",
    "urllib3",
    "botocore",
    "boto3",
    "s3transfer",
    "faster_whisper",
    "chromadb",
    "bm25s",
    "alembic",
)

RequestIdGetter = Callable[[], str | None]


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", "component", "pid", "request_id"?, "exception"?}`` per line."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "component": self.component,
            "pid": record.process,
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            line["request_id"] = request_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        # ensure_ascii: one line per record whatever the message holds (lone surrogates, control characters)
        return json.dumps(line, ensure_ascii=True, default=str)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to records that have none, from the component's getter (never fails a log call)."""

    def __init__(self, getter: RequestIdGetter | None) -> None:
        super().__init__()
        self.getter = getter

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None and self.getter is not None:
            try:
                record.request_id = self.getter()
            except Exception:  # noqa: BLE001 - a log line must never raise
                record.request_id = None
        return True


class _KhulumaHandler(logging.StreamHandler):
    """Marks the handler this module installed, so configuring twice replaces it instead of doubling lines."""


def configure_logging(
    component: str = "khuluma", request_id: RequestIdGetter | None = None, level: str | None = None
) -> None:
    """JSON lines on the real standard error for the root logger, at ``level`` (default: ``KHULUMA_LOG_LEVEL``,
    else INFO). Idempotent: a second call replaces the first one's handler."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _KhulumaHandler)]:
        root.removeHandler(handler)
    handler = _KhulumaHandler(sys.__stderr__ or sys.stderr)
    handler.setFormatter(JsonFormatter(component))
    handler.addFilter(RequestIdFilter(request_id))
    root.addHandler(handler)
    root.setLevel((level or os.environ.get(LEVEL_VARIABLE) or "INFO").upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)

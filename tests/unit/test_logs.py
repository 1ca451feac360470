"""The JSON log line format (contracts/logs.py)."""

from __future__ import annotations

import json
import logging

from contracts.logs import JsonFormatter, RequestIdFilter, configure_logging


def _record(message: str, *args: object, exc_info=None) -> logging.LogRecord:  # type: ignore[no-untyped-def]
    return logging.LogRecord("khuluma.test", logging.ERROR, __file__, 1, message, args, exc_info)


def test_a_line_is_one_json_object_with_the_request_id_and_the_traceback() -> None:
    try:
        raise ValueError("bad \u00e9")
    except ValueError:
        import sys

        record = _record("failed for %s", "Sawubona \ud800 \u0394", exc_info=sys.exc_info())
    RequestIdFilter(lambda: "req-42").filter(record)
    text = JsonFormatter("TextAnalysis").format(record)
    assert "\n" not in text  # one line, whatever the message holds
    line = json.loads(text)
    assert line["level"] == "ERROR" and line["logger"] == "khuluma.test" and line["component"] == "TextAnalysis"
    assert line["request_id"] == "req-42" and line["message"].startswith("failed for Sawubona ")
    assert "ValueError: bad \u00e9" in line["exception"] and "Traceback" in line["exception"]


def test_no_request_id_when_there_is_none_and_a_failing_getter_never_breaks_logging() -> None:
    def broken() -> str:
        raise RuntimeError("no context")

    record = _record("plain")
    assert RequestIdFilter(broken).filter(record)
    assert "request_id" not in json.loads(JsonFormatter("x").format(record))


def test_configuring_twice_keeps_one_handler() -> None:
    root = logging.getLogger()
    configure_logging("a", None, "WARNING")
    configure_logging("b", None, "INFO")
    ours = [h for h in root.handlers if type(h).__name__ == "_KhulumaHandler"]
    assert len(ours) == 1 and ours[0].formatter.component == "b"  # type: ignore[union-attr]
    assert root.level == logging.INFO
    assert logging.getLogger("httpx").level == logging.WARNING

"""What ``khuluma qualify`` decides, apart from the calls it makes: the thresholds, each check's outcome, the table
and the exit code (tested without a service)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from rich.table import Table


@dataclass(frozen=True)
class Thresholds:
    max_health_s: float = 1.0
    max_wer: float = 0.3
    max_sync_s: float = 15.0
    max_first_delta_s: float = 5.0
    max_live_rtf: float = 1.5


class Status(Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_INSTALLED = "NOT INSTALLED"  # an optional capability without its model: reported, not a failure


STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.NOT_INSTALLED: "yellow"}
SECTIONS = ("sanity", "accuracy", "performance")


@dataclass(frozen=True)
class Outcome:
    section: str
    name: str
    status: Status
    measured: str = ""
    threshold: str = ""
    detail: str = ""


def at_most(
    section: str, name: str, value: float | None, limit: float, unit: str = "s", detail: str = "", digits: int = 2
) -> Outcome:
    """PASS when ``value`` is at most ``limit``; a check that could not measure (None) fails with ``detail``."""
    threshold = f"<= {limit:g}{unit and ' ' + unit}"
    if value is None:
        return Outcome(section, name, Status.FAIL, "-", threshold, detail or "not measured")
    status = Status.PASS if value <= limit else Status.FAIL
    return Outcome(section, name, status, f"{value:.{digits}f}{unit and ' ' + unit}", threshold, detail)


def failed(section: str, name: str, detail: str) -> Outcome:
    return Outcome(section, name, Status.FAIL, "-", "", detail)


def exit_code(outcomes: list[Outcome]) -> int:
    """0 only when every check passed (a capability that is not installed is not a failure), else 1."""
    return 0 if outcomes and all(o.status is not Status.FAIL for o in outcomes) else 1


def table(outcomes: list[Outcome]) -> Table:
    shown = Table(title="Qualification", show_lines=False)
    for column in ("section", "check", "result", "measured", "threshold", "detail"):
        shown.add_column(column, overflow="fold")
    for outcome in sorted(outcomes, key=lambda o: SECTIONS.index(o.section) if o.section in SECTIONS else 99):
        shown.add_row(
            outcome.section,
            outcome.name,
            f"[{STYLE[outcome.status]}]{outcome.status.value}[/]",
            outcome.measured,
            outcome.threshold,
            outcome.detail,
        )
    return shown


def summary(outcomes: list[Outcome]) -> str:
    counts = {status: sum(o.status is status for o in outcomes) for status in Status}
    verdict = "QUALIFIED" if exit_code(outcomes) == 0 else "NOT QUALIFIED"
    return (
        f"{counts[Status.PASS]} passed, {counts[Status.FAIL]} failed, {counts[Status.NOT_INSTALLED]} not installed: "
        f"{verdict}"
    )

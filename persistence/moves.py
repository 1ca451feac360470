"""Status columns as small state machines: the moves allowed, and the compare-and-set UPDATE that makes one.

Jobs (``uploads.job_status``) and batches (``batches.status``, ``batch_items.status``) both change a status only
by a named :class:`Move`, written as a conditional UPDATE whose WHERE names the move's sources; :func:`changed`
says whether it won (two workers or requests racing for the same row: exactly one sees 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import CursorResult, Update
from sqlalchemy.orm import Session

S = TypeVar("S")


@dataclass(frozen=True)
class Move(Generic[S]):
    """From any of ``sources`` to one of ``targets``."""

    sources: frozenset[S]
    targets: frozenset[S]

    @classmethod
    def to(cls, sources: set[S], target: S) -> Move[S]:
        return cls(frozenset(sources), frozenset({target}))

    @property
    def target(self) -> S:
        """The one target of a move that has one."""
        (only,) = self.targets
        return only


def changed(s: Session, statement: Update) -> int:
    """Rows a conditional UPDATE changed: 0 when its WHERE no longer held (another caller moved first)."""
    result = s.execute(statement.execution_options(synchronize_session=False))
    return cast(CursorResult[Any], result).rowcount

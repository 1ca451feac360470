"""The order in which live steps take the cores: a stream's last step (its final) before the partial steps of other
streams, and the partial steps in their order of arrival.

When several streams end together, each final otherwise waits in the decoder's queue behind partial steps that are
already out of date for a stream that is ending and that no speaker is waiting on as closely. Only as many steps run
at once as the replica has cores (a decode of the short live window keeps one core busy); the others wait here.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def replica_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or Ray's placement narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class StepOrder:
    """At most ``slots`` live steps at once; a waiting final goes before every waiting partial step."""

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self._running = 0
        self._waiting: list[tuple[bool, int]] = []  # (is a partial step, arrival): the smallest goes next
        self._arrivals = itertools.count()
        self._changed = threading.Condition()

    @contextmanager
    def turn(self, final: bool) -> Iterator[None]:
        """Wait for this step's turn (``final``: the stream's last step), and hold a slot while it runs."""
        ticket = (not final, next(self._arrivals))
        with self._changed:
            self._waiting.append(ticket)
            self._changed.wait_for(lambda: self._running < self.slots and min(self._waiting) == ticket)
            self._waiting.remove(ticket)
            self._running += 1
            self._changed.notify_all()  # a free slot may remain for the next in line
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    @property
    def waiting(self) -> int:
        with self._changed:
            return len(self._waiting)

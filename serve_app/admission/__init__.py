"""Admission: what a request must pass at the edge before it runs, and what a refusal says.

:class:`Admission` is one ingress replica's, made of three parts:

- by capacity (:attr:`Admission.capacity`, ``capacity.py``): this server's capacity for each kind of work, learned
  from the measured queueing delay, for requests sized by what they cost (``cost.py``, from their headers) and of
  the kind their route declares (``kinds.py``); a request past it answers 503 with ``Retry-After`` before its body
  is read, with a fair share between customers;
- by the customer (:attr:`Admission.customers`, ``customers.py``): each customer's limits (requests per minute,
  audio seconds per day, concurrent share), held across every replica in the database
  (``persistence/admission_counts.py``); past one, 429;
- live sessions (:attr:`Admission.live`, ``live.py``): admitted while speech keeps every open session at real time.

``serve_app/middleware.py:AdmissionMiddleware`` applies capacity; ``serve_app/auth.py`` the customer's limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.settings import AdmissionSettings
from persistence.session import Database
from persistence.usage_meter import UsageMeter
from serve_app.admission.capacity import Capacity
from serve_app.admission.customers import STATE_KEY, Admitted, Customers, Limits, RateState, rate_headers
from serve_app.admission.live import LiveSeat, LiveSessions


@dataclass(frozen=True)
class Admission:
    """The admission of one ingress replica: its customers' limits (:attr:`customers`), its live sessions
    (:attr:`live`) and its capacity for each kind of work (:attr:`capacity`)."""

    customers: Customers
    live: LiveSessions
    capacity: Capacity

    @classmethod
    def of(cls, db: Database, usage: UsageMeter, settings: AdmissionSettings) -> Admission:
        """A replica's admission, its counts shared with the other replicas in ``db``."""
        return cls(Customers(db, usage, settings), LiveSessions(db, settings), Capacity(settings))


__all__ = [
    "STATE_KEY",
    "Admission",
    "Admitted",
    "Customers",
    "Limits",
    "LiveSeat",
    "LiveSessions",
    "RateState",
    "rate_headers",
]

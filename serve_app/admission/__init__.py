"""Admission: what a request must pass at the edge before it runs, and what a refusal says.

- ``capacity.py``: what a model-bound request costs (from its headers) and this server's capacity for each kind of
  work, learned from the measured queueing delay; a request past it answers 503 with ``Retry-After`` before its body
  is read, with a fair share between customers;
- ``customers.py``: each customer's limits (requests per minute, audio seconds per day, concurrent share), held
  across every replica in the database (``persistence/admission_counts.py``); past one, 429;
- ``live.py``: live sessions, admitted while speech keeps every open session at real time.

``serve_app/middleware.py:AdmissionMiddleware`` applies capacity; ``serve_app/auth.py`` the customer's limits.
"""

from serve_app.admission.customers import STATE_KEY, Admission, Admitted, Limits, RateState, rate_headers
from serve_app.admission.live import LiveSeat, LiveSessions

__all__ = ["STATE_KEY", "Admission", "Admitted", "Limits", "LiveSeat", "LiveSessions", "RateState", "rate_headers"]

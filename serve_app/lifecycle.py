"""A graceful stop, as one ingress replica sees it (``khuluma serve`` on SIGTERM/SIGINT: ``khuluma/cli/stopping.py``).

:meth:`Drain.begin` stops admissions: new HTTP requests answer 503 with ``Retry-After`` and ``Connection: close``
(``serve_app/middleware.py:AdmissionMiddleware``), new live sessions are refused before they are accepted, the
health routes answer 503 ``draining`` so load balancers stop sending, and every open live session is closed with
1001 (going away) and a message saying why. Requests already in flight go on; :meth:`Drain.wait_idle` waits for
them within the grace period. Nothing here stops a process: the command that started the service does that once
its replicas report idle (or the grace period ends).
"""

from __future__ import annotations

import asyncio
import time

SHUTTING_DOWN = "The server is shutting down; reconnect in a moment to continue."
REFUSAL = "The service is shutting down; retry in a moment (another server may take the request)."
RETRY_AFTER_S = 5
GOING_AWAY = 1001  # WebSocket close code: the server is going away


class Drain:
    """Whether this replica still admits work, and how much is in flight (HTTP requests and live sessions)."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0

    def begin(self) -> None:
        self.draining = True

    async def wait_idle(self, timeout_s: float, every_s: float = 0.05) -> bool:
        """Wait until nothing is in flight, at most ``timeout_s``; whether it got there."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight > 0:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(every_s)
        return True

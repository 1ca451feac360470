"""Load shedding at the edge: at most so many model-bound requests of a capability in flight per ingress replica.

Serve's bounded queues (``max_ongoing_requests``/``max_queued_requests`` per deployment) count calls, and the text
handle sends one call per group of up to 32 requests, so they cannot keep the requests admitted under overload
near the latency of a loaded but not overloaded service. This bound counts HTTP requests: one more than
``limits.<capability>_in_flight`` answers 503 with ``Retry-After`` at once, before authentication or the body is
read, so a refusal costs the ingress almost nothing and the admitted requests keep the cores. Sized from the
concurrency at which each capability reaches its capacity on 2 cores (docs/operators.md, bounded queues).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from contracts.errors import Overloaded
from contracts.settings import LimitsSettings

# Model-bound routes (the request waits on a model deployment), by capability; every other route is not bounded
# here (health, metadata, uploads of async jobs and batches, knowledge-base management).
ROUTES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("text", re.compile(r"/api/v1/(entity_recognition/process|sentiment_analysis/process|classify|language/detect)")),
    ("text", re.compile(r"/v1/embeddings")),
    ("translation", re.compile(r"/(api/v1/translate/process|v1/translate)")),
    ("search", re.compile(r"/api/v1/search/knowledgebase/[^/]+/(query|document)")),
    (
        "speech",
        re.compile(r"/(api/v1/transcribe/sync|api/v2alpha/transcribe/(sync/file|fast)|v1/transcribe(/sync)?)"),
    ),
    ("speech", re.compile(r"/v1/audio/(transcriptions|translations)")),
)
RETRY_AFTER_S = {"text": 1, "search": 1, "translation": 2, "speech": 5}


def capability_of(method: str, path: str) -> str | None:
    """The capability whose bound a request counts against, or None."""
    if method != "POST":
        return None
    for capability, pattern in ROUTES:
        if pattern.fullmatch(path):
            return capability
    return None


@dataclass
class InFlightBounds:
    """The per-capability counts of one ingress replica (one event loop: no lock needed)."""

    limits: LimitsSettings
    in_flight: dict[str, int] = field(default_factory=dict)

    def bound(self, capability: str) -> int:
        return int(getattr(self.limits, f"{capability}_in_flight"))

    def enter(self, capability: str) -> None:
        """Count the request in, or raise :class:`Overloaded` (503, ``Retry-After``) when its capability is full."""
        bound = self.bound(capability)
        now = self.in_flight.get(capability, 0)
        if bound and now >= bound:
            retry = RETRY_AFTER_S[capability]
            raise Overloaded(
                f"The service is at capacity: {now} {capability} requests are in flight on this server "
                f"(KHULUMA_LIMITS_{capability.upper()}_IN_FLIGHT). Retry after {retry} s.",
                retry,
            )
        self.in_flight[capability] = now + 1

    def leave(self, capability: str) -> None:
        self.in_flight[capability] -= 1

from __future__ import annotations

from pydantic import BaseModel, Field


class UsageCounters(BaseModel):
    total_invocations: int = 0
    total_successful_invocations: int = 0
    total_failed_invocations: int = 0
    total_pending_invocations: int = 0
    total_seconds_transcribed: float = 0.0
    total_tokens: int = 0
    total_refused_invocations: int = Field(
        default=0,
        description="Requests refused before any work: at one of the customer's limits (429) or because a queue was "
        "full (503). Not invocations: they are in no other counter and never billed.",
    )


class UsageBucket(UsageCounters):
    start_date_time: str
    end_date_time: str


class UsageReport(UsageCounters):
    start_date_time: str
    end_date_time: str
    interval: str
    usage: list[UsageBucket] = Field(default_factory=list)

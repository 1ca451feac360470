from __future__ import annotations

from pydantic import BaseModel, Field


class UsageCounters(BaseModel):
    total_invocations: int = 0
    total_successful_invocations: int = 0
    total_failed_invocations: int = 0
    total_pending_invocations: int = 0
    total_seconds_transcribed: float = 0.0
    total_tokens: int = 0


class UsageBucket(UsageCounters):
    start_date_time: str
    end_date_time: str


class UsageReport(UsageCounters):
    start_date_time: str
    end_date_time: str
    interval: str
    usage: list[UsageBucket] = Field(default_factory=list)

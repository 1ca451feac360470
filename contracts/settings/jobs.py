"""Settings of async v1 jobs (``KHULUMA_JOBS_*``) and their webhooks (``KHULUMA_WEBHOOKS_*``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class JobsSettings(BaseModel):
    """Asynchronous v1 transcription jobs."""

    model_config = ConfigDict(extra="ignore")
    concurrency: int = Field(default=1, description="Async transcription jobs processed at once.")
    lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Lease on a claimed async job, renewed while it runs. A job whose worker died is taken up "
        "again once its lease expires.",
    )
    max_attempts: int = Field(
        default=3,
        ge=1,
        description="Times a job is started (worker crashes, transcription unavailable) before it is marked failed.",
    )
    poll_seconds: float = Field(default=2.0, gt=0, description="How often the job worker looks for due work.")
    retention_days: float = Field(
        default=30.0,
        ge=0,
        description="How long a v1 upload (its audio and, once its job finished, its transcript) is kept. Older "
        "ones are deleted by the jobs worker's sweep and by `khuluma db prune`: their audio, their row (its id then "
        "answers 404) and stray upload files of crashed requests. Queued or running jobs and undelivered webhooks "
        "are never deleted. Usage records are kept. 0: keep everything forever.",
    )
    sweep_interval_seconds: float = Field(
        default=3600.0, gt=0, description="How often the jobs worker runs the retention sweep."
    )


class WebhooksSettings(BaseModel):
    """Webhook delivery for async jobs."""

    model_config = ConfigDict(extra="ignore")
    retry_seconds: float = Field(default=600.0, description="How long webhook deliveries are retried.")
    allow_private: bool = Field(
        default=False, description="Allow webhook URLs on loopback/private addresses (tests, on-prem receivers)."
    )
    backoff_seconds: float = Field(
        default=2.0, gt=0, description="Delay before the first webhook retry; it doubles after each failure."
    )
    backoff_max_seconds: float = Field(default=300.0, gt=0, description="Longest delay between retries.")
    timeout_seconds: float = Field(default=10.0, gt=0, description="Time a webhook receiver has to answer.")

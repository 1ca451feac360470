"""Contract of the Jobs deployment (the worker of async v1 transcription jobs): what a finished job keeps, the
worker's status, and the typed handle callers use.

Jobs are placed in the database (``persistence/jobs.py``), not through this handle: the ingress only nudges the
worker (:meth:`JobsClient.wake`) so a new job starts at once instead of at the next poll.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from contracts.capabilities import CapabilityInfo
from contracts.handles import DeploymentClient
from contracts.speech import TranscriptionResult


class JobSegment(BaseModel):
    """One item of ``postprocessed_text`` (the get answer and the webhook payload)."""

    start_time: float
    end_time: float
    text: str
    speaker_id: str | None = None  # left out of the wire when None


class JobResult(BaseModel):
    """What a completed job keeps of its transcription (``uploads.result``, beside the webhook's status code)."""

    text: str = ""
    language_id: str = ""
    postprocessed_text: list[JobSegment] = Field(default_factory=list)
    audio_length_seconds: float = 0.0
    warnings: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, result: TranscriptionResult) -> JobResult:
        """The text, the language and the timed speech segments of a transcription; a transcript without a
        timeline is one segment over the whole audio."""
        segments = [
            JobSegment(
                start_time=item.start_time,
                end_time=item.end_time,
                text=item.text.strip(),
                speaker_id=item.speaker_id or None,
            )
            for item in result.timeline
            if item.type == "speech" and item.text.strip()
        ]
        text = result.text.strip()
        if not segments and text:
            segments = [JobSegment(start_time=0.0, end_time=float(result.audio_length_seconds), text=text)]
        return cls(
            text=text,
            language_id=result.language_code or "",
            postprocessed_text=segments,
            audio_length_seconds=float(result.audio_length_seconds),
            warnings=list(result.warnings),
        )


class JobsStatus(BaseModel):
    """One Jobs replica's view of its work."""

    worker: str = Field(description="host:pid:id of the replica (its name in the logs)")
    running_jobs: int
    deliveries: int = Field(description="Webhook deliveries in flight.")
    processed: int = Field(description="Jobs this replica finished since it started.")


class JobsClient(DeploymentClient):
    """Typed handle of ``deployments.jobs:Jobs``."""

    deployment = "Jobs"

    async def wake(self) -> bool:
        """deployments.jobs.Jobs.wake: look for due work now (a job was just placed)."""
        return await self._call(self._handle.wake.remote())

    async def status(self) -> JobsStatus:
        """deployments.jobs.Jobs.status."""
        return await self._call(self._handle.status.remote())

    async def describe(self, timeout: float) -> list[CapabilityInfo]:
        """Nothing: the Jobs deployment describes batch transcription, which the batch handle (``BatchClient``) lists
        where the service serves it, so one asked as the jobs handle lists no capability of its own."""
        return []

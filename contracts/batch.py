"""Contract of the BatchRunner deployment: the typed handle callers use.

The ingress owns a batch's state transitions up to PROCESSING (``persistence/batches.py``) and then hands the
batch to the runner by id; everything else the runner needs is in the database, so no models travel here.
"""

from __future__ import annotations

from contracts.handles import DeploymentClient


class BatchClient(DeploymentClient):
    """Typed handle of ``deployments.batch:BatchRunner``."""

    deployment = "BatchRunner"

    async def run(self, batch_id: str) -> bool:
        """deployments.batch.BatchRunner.run: start transcribing a PROCESSING batch in the background; False
        when the runner is running it already."""
        return await self._call(self._handle.run.remote(batch_id))

    async def running(self) -> list[str]:
        """deployments.batch.BatchRunner.running: ids of the batches being transcribed now."""
        return await self._call(self._handle.running.remote())

    async def close(self) -> None:
        """deployments.batch.BatchRunner.close: stop resuming batches (the next runner resumes the rest)."""
        await self._call(self._handle.close.remote())

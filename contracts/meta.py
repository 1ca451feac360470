from __future__ import annotations

from pydantic import BaseModel, Field

from contracts.capabilities import CapabilityInfo


class Metadata(BaseModel):
    version: str
    git_commit: str
    release_name: str
    release_date: str


class DeploymentHealth(BaseModel):
    name: str
    healthy: bool
    detail: str | None = None


class Health(BaseModel):
    status: str = Field(description="ok | degraded | draining (a graceful stop is under way)")
    deployments: list[DeploymentHealth]


class ModelsListing(BaseModel):
    capabilities: list[CapabilityInfo]

from __future__ import annotations

from pydantic import BaseModel, Field


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
    status: str = Field(description="ok | degraded")
    deployments: list[DeploymentHealth]


class LanguageSupport(BaseModel):
    code: str
    name: str
    supported: bool
    model: str | None = None
    note: str | None = None


class CapabilityModels(BaseModel):
    capability: str
    installed: bool
    model: str | None = None
    backend: str | None = None
    languages: list[LanguageSupport] = Field(default_factory=list)
    note: str | None = None


class ModelsListing(BaseModel):
    capabilities: list[CapabilityModels]

"""What a deployment says it really serves: one entry per capability, the truth behind ``GET /api/v1/models``."""

from __future__ import annotations

from pydantic import BaseModel, Field

from contracts import languages
from contracts.quality import Quality


class LanguageSupport(BaseModel):
    code: str
    name: str
    supported: bool
    model: str | None = None
    note: str | None = None
    family: str | None = Field(default=None, description="The model's family where there are several (speech).")
    licence: str | None = Field(default=None, description="The model's licence, where it is known.")
    quality: Quality | None = Field(
        default=None,
        description="Quality on real data: measured here (contracts/quality.py), or the publisher's figure "
        "(published: true), or neither. Null: not applicable (no model).",
    )

    @classmethod
    def of(
        cls,
        code: str,
        supported: bool,
        model: str | None,
        note: str | None = None,
        *,
        name: str | None = None,
        quality: Quality | None = None,
        family: str | None = None,
        licence: str | None = None,
    ) -> LanguageSupport:
        """An entry named from the language registry (``name`` overrides, e.g. ``languages.speech_name(code)``)."""
        return cls(
            code=code,
            name=name or languages.name(code),
            supported=supported,
            model=model,
            note=note,
            quality=quality,
            family=family,
            licence=licence,
        )


class CapabilityInfo(BaseModel):
    capability: str
    installed: bool
    model: str | None = None
    backend: str | None = None
    languages: list[LanguageSupport] = Field(default_factory=list)
    note: str | None = None

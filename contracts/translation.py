"""Contract of the Translation deployment: its request and result models, and the typed handle callers use
(the translation route's service, and the Speech deployment for transcripts in English)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from contracts import languages
from contracts.capabilities import CapabilityInfo, LanguageSupport
from contracts.handles import DeploymentClient
from contracts.installs import TRANSLATION_NOT_INSTALLED
from contracts.unicode import UnicodeText


class TranslateRequest(BaseModel):
    """The route's body (wire names)."""

    input_text: UnicodeText
    source_lang: UnicodeText
    target_lang: UnicodeText


class TranslatedText(BaseModel):
    translated_text: str


class TranslationResult(BaseModel):
    """The route's answer (wire names)."""

    id: str
    translation: list[TranslatedText]


class TranslationRequest(BaseModel):
    """One text to translate between two NLLB-200 codes (``zul_Latn``), already checked against the registry."""

    text: str
    source: str = Field(description="NLLB-200 code of the text's language")
    target: str = Field(description="NLLB-200 code to translate into")


class DecodedSegment(BaseModel):
    source: str
    tokens: list[str]
    text: str


class DetailedTranslation(BaseModel):
    """A translation with the model and the decoded tokens of every sentence (diagnostics and tests)."""

    translated_text: str
    model: str
    segments: list[DecodedSegment]


class TranslationClient(DeploymentClient):
    """Typed handle of ``deployments.translation:Translation``."""

    deployment = "Translation"

    async def translate(self, request: TranslationRequest) -> str:
        """deployments.translation.Translation.translate"""
        return await self._call(self._handle.translate.remote(request))

    async def translate_detailed(self, request: TranslationRequest) -> DetailedTranslation:
        """deployments.translation.Translation.translate_detailed"""
        return await self._call(self._handle.translate_detailed.remote(request))


def nllb_language(nllb: str, supported: bool, model: str | None, note: str | None = None) -> LanguageSupport:
    """A listing entry keyed by the NLLB code (what the route takes), named from the registry."""
    return LanguageSupport.of(nllb, supported, model, note, name=languages.name(languages.NLLB_TO_CODE[nllb]))


def not_installed(note: str = TRANSLATION_NOT_INSTALLED) -> CapabilityInfo:
    """/api/v1/models' translation entry while no model serves: every language listed, none supported."""
    return CapabilityInfo(
        capability="translation",
        installed=False,
        note=note,
        languages=[nllb_language(code, False, None) for code in languages.TRANSLATION_NLLB_CODES],
    )

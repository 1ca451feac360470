from __future__ import annotations

from pydantic import BaseModel


class TranslateRequest(BaseModel):
    input_text: str
    source_lang: str
    target_lang: str


class TranslatedText(BaseModel):
    translated_text: str


class TranslationResult(BaseModel):
    id: str
    translation: list[TranslatedText]

from __future__ import annotations

from pydantic import BaseModel, Field


class TextRequest(BaseModel):
    encoded_text: str = Field(description="Text to analyse; any language.")


class Entity(BaseModel):
    entity: str = Field(description="Entity type: person, location, organisation, date, ...")
    word: str
    start: int = Field(description="Character offset of the entity in the input (text[start:end] == word).")
    end: int


class SentimentScore(BaseModel):
    label: str = Field(description="positive, negative or neutral")
    score: float


class SentenceSentiment(BaseModel):
    text: str
    sentiment: list[SentimentScore]


class SentimentResult(BaseModel):
    Id: str
    Sentiments: list[SentenceSentiment]


class IntentExample(BaseModel):
    intent: str
    example: str


class ClassifyRequest(BaseModel):
    examples: list[IntentExample] = Field(description="At least two examples per intent.")
    inputs: list[str]


class IntentScore(BaseModel):
    intent: str
    score: float


class ClassificationResult(BaseModel):
    probabilities: list[IntentScore]


class LanguageDetectRequest(BaseModel):
    text: str
    spans: bool = Field(default=False, description="Also detect per-span languages (code-switched text).")


class LanguageScore(BaseModel):
    language: str = Field(description="ISO 639-3 code, e.g. zul")
    nllb_code: str = Field(description="NLLB-200 code, e.g. zul_Latn")
    score: float


class LanguageSpan(BaseModel):
    start: int
    end: int
    text: str
    language: str


class LanguageDetectResult(BaseModel):
    language: str
    nllb_code: str
    confidence: float
    candidates: list[LanguageScore]
    spans: list[LanguageSpan] = Field(default_factory=list)

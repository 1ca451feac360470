"""Settings of translation (``KHULUMA_TRANSLATION_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TranslationSettings(BaseModel):
    """Translation (NLLB-200)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(
        default=None,
        description="Name registered with `khuluma models add|pull`, a CTranslate2 directory or a Hugging Face "
        "directory of an NLLB-200 model. Unset: translation answers 503 with install instructions.",
    )
    deploy: Literal["auto", "always"] = Field(
        default="auto",
        description="`auto`: the Translation deployment runs only when a model is set (here, or as its "
        "`user_config` in the config `khuluma serve` reads); without one the ingress answers the same 503 itself and "
        "no replica costs memory at idle (docs/translation.md). `always`: deploy it even without a model, so that "
        "`serve deploy` of a config whose Translation `user_config` names one loads it without a restart (the "
        "cluster profile does).",
    )
    backend: str = Field(
        default="ctranslate2",
        description="`ctranslate2` or `transformers`: how a Hugging Face directory named by `translation.model` "
        "is run (ctranslate2 converts it once to int8). Registered models and CTranslate2 directories carry "
        "their own backend.",
    )
    device: str = Field(default="auto", description="`auto`, `cpu` or `cuda` for translation.")
    compute_type: str = Field(
        default="auto",
        description="CTranslate2 compute type for translation; `auto` = int8 on CPU, float16 on GPU.",
    )
    threads: int = Field(
        default=0, description="CPU threads per translation replica (0: CTranslate2's default, up to 4)."
    )
    beam_size: int = Field(default=2, description="Beam size for translation decoding.")
    max_length: int = Field(default=256, description="Maximum generated tokens per sentence.")
    max_words: int = Field(default=256, description="Word limit of a translation request.")
    max_chars: int = Field(
        default=20_000,
        ge=1,
        description="Character (code point) limit of a translation's `input_text` (about 80 per word at the word "
        "limit); the word limit alone lets a text without spaces through. Over it: 400 naming the field. The "
        "`text.max_bytes` and `text.max_word_chars` limits apply too.",
    )

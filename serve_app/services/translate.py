"""Translation service (NLLB codes)."""

from __future__ import annotations

import uuid
from typing import Any

from serve_app.context import AppContext
from contracts.errors import InvalidInput
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal

LANGUAGES = {
    "nso_Latn": "Northern Sotho", "afr_Latn": "Afrikaans", "sot_Latn": "Southern Sotho", "ssw_Latn": "Swati",
    "tso_Latn": "Tsonga", "tsn_Latn": "Tswana", "xho_Latn": "Xhosa", "zul_Latn": "Zulu", "eng_Latn": "English",
    "swh_Latn": "Swahili", "sna_Latn": "Shona",
}


async def translate(ctx: AppContext, caller: Principal, text: str, source: str, target: str) -> dict[str, Any]:
    accepted = ", ".join(LANGUAGES)
    for field, code in (("source_lang", source), ("target_lang", target)):
        if code not in LANGUAGES:
            raise InvalidInput(f"Invalid request: field '{field}': unsupported language code '{code}'. "
                             f"Accepted codes: {accepted}.")
    if not text.strip():
        raise InvalidInput("Invalid request: field 'input_text' must not be empty.")
    words = count_tokens(text)
    if words > ctx.settings.translation.max_words:
        raise InvalidInput(f"Text has {words} words; the limit is {ctx.settings.translation.max_words} words.")
    if source == target:
        translated = text  # documented: identical source and target return the input unchanged
    else:
        translated = await ctx.backends.require("translation").translate(text, source, target)
    await record_usage(ctx, caller, "translate", tokens=words)
    return {"id": str(uuid.uuid4()), "translation": [{"translated_text": translated}]}

"""Translation service: checks the request once (codes from the language registry, the size limits, the word
limit) before the first hop, meters it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from contracts.errors import InvalidInput, ModelMissing
from contracts.installs import TRANSLATION_NOT_INSTALLED
from contracts.languages import check_translation_code
from contracts.translation import TranslatedText, TranslationRequest, TranslationResult
from serve_app.context import AppContext, required
from serve_app.services.text_limits import TextLimits, check_size
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal


@dataclass(frozen=True)
class Fields:
    """The request's field names, as its errors name them."""

    text: str = "input_text"
    source: str = "source_lang"
    target: str = "target_lang"


async def translate(
    ctx: AppContext,
    caller: Principal,
    text: str,
    source: str,
    target: str,
    fields: Fields = Fields(),
    route: str = "translate",
) -> TranslationResult:
    check_translation_code(source, fields.source)
    check_translation_code(target, fields.target)
    if not text.strip():
        raise InvalidInput(f"Invalid request: field '{fields.text}' must not be empty.")
    check_size(text, fields.text, TextLimits.of(ctx.settings, ctx.settings.translation.max_chars))
    words = count_tokens(text)
    limit = ctx.settings.translation.max_words
    if words > limit:
        raise InvalidInput(f"Text has {words} words; the limit is {limit} words.")
    if source == target:
        translated = text  # documented: identical source and target return the input unchanged
    else:
        request = TranslationRequest(text=text, source=source, target=target)
        if ctx.translation_not_installed:
            raise ModelMissing(TRANSLATION_NOT_INSTALLED)
        translated = await required(ctx.clients.translation, "translation").translate(request)
    await record_usage(ctx, caller, route, tokens=words)
    return TranslationResult(id=str(uuid.uuid4()), translation=[TranslatedText(translated_text=translated)])

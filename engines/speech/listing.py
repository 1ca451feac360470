"""The per-language truth of ``GET /api/v1/models`` for transcription, and the warning a transcript in a language of
poor measured quality carries.

:func:`languages` lists the spec's transcription languages and the other South African ones, each with the model
that serves it, its family and licence, and its quality (measured here, published, or neither: what the route's
recognizer says, ``Recognizer.served``), or how to add a model where none serves it; then any other language an
operator configured.
"""

from __future__ import annotations

from contracts.capabilities import LanguageSupport
from contracts.installs import MODEL_SETTING, install_hint
from contracts.languages import CODE_SWITCHED_ZULU, LISTED_TRANSCRIPTION_CODES
from contracts.languages import speech_name as language_name
from engines.speech.recognition import Route
from engines.speech.routing import SpeechModels

SETTING = MODEL_SETTING["speech"]  # KHULUMA_SPEECH_LANGUAGE_MODELS
# South African languages beyond the spec's that /api/v1/models lists too (served, or how to add a model)
OTHER_SA_CODES = ("xho", "nso", "tsn", "tso", "ssw", "ven", "nbl")


def languages(models: SpeechModels) -> list[LanguageSupport]:
    """Every listed language (the spec's, then the other South African ones), then any other routed language."""
    routes = models.routes()
    listed = [*LISTED_TRANSCRIPTION_CODES, *(c for c in OTHER_SA_CODES if c not in LISTED_TRANSCRIPTION_CODES)]
    out = [_support(code, routes.get(code)) for code in listed]
    out += [_support(code, route) for code, route in routes.items() if code not in listed]
    return out


def _support(code: str, route: Route | None) -> LanguageSupport:
    name = language_name(code) if code in LISTED_TRANSCRIPTION_CODES or code in OTHER_SA_CODES else code
    if route is None:
        target = "zul" if code == CODE_SWITCHED_ZULU else code
        hint = (
            f"Whisper has no {language_name(target)}. Add a model: {install_hint('speech')}; or any model "
            f'directory with {SETTING}=\'{{"{target}": "<dir or registered name>"}}\'.'
        )
        return LanguageSupport.of(code, False, None, hint, name=name)
    served = route.recognizer.served(route)
    return LanguageSupport.of(
        code,
        True,
        served.model,
        served.note,
        name=name,
        quality=served.quality,
        family=route.recognizer.family,
        licence=served.licence,
    )


def quality_warning(route: Route) -> str | None:
    """The warning a transcript in ``route``'s language carries when its quality on real speech is poor."""
    served = route.recognizer.served(route)
    quality = served.quality
    if not quality.poor:
        return None
    return (
        f"Transcripts in {language_name(route.code)} from {served.model} are unreliable: {quality.note} "
        f"(WER {quality.value:.2f} on {quality.data}). Check them before relying on them, or configure a model "
        f"for the language in {SETTING}."
    )

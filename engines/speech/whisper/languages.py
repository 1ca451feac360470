"""Whisper's languages: which codes Whisper base serves, Whisper's language token of each code, and the routes of a
default model and per-language models (``WhisperRecognizer.routes``).

==========  =====================  ===============================================================
code        language               model
==========  =====================  ===============================================================
``afr``     Afrikaans              Whisper base (token ``af``) unless a model is configured
``eng``     (South African) English  Whisper base (``en``)
``fra``     (African) French       Whisper base (``fr``)
``zul``     isiZulu                only a configured model: Whisper has no isiZulu
``sot``     Sesotho                only a configured model: Whisper has no Sesotho
``cs-zul``  code-switched isiZulu  the ``cs-zul`` model if configured, else the ``zul`` model
==========  =====================  ===============================================================

Codes, names, aliases and Whisper tokens come from the language registry (``contracts.languages``).
"""

from __future__ import annotations

from contracts import languages
from contracts.errors import UnsupportedLanguage
from contracts.languages import CODE_SWITCHED_ZULU, LISTED_TRANSCRIPTION_CODES, TRANSCRIPTION_CODES, transcription_code
from engines.speech.recognition import Recognizer, Route

DEFAULT_MODEL = "default"  # key of the default model in the model table
SETTING = "KHULUMA_SPEECH_LANGUAGE_MODELS"  # contracts.installs.MODEL_SETTING["speech"]


def _registry(code: str) -> languages.Language | None:
    return languages.LANGUAGES.get(code)


def on_base(code: str) -> bool:
    """Whether Whisper base transcribes ``code`` (its default model serves it)."""
    lang = _registry(code)
    return bool(lang and lang.whisper_base)


def whisper_token(code: str) -> str | None:
    """Whisper's language token for ``code`` (None: Whisper does not know the language, e.g. isiZulu)."""
    lang = _registry(code)
    return lang.whisper if lang else None


def whisper_language_name(token: str) -> str:
    """English name of a Whisper language token ('sw' -> 'Swahili'): the registry's, else CLDR's (babel)."""
    for lang in languages.LANGUAGES.values():
        if lang.whisper == token:
            return lang.name
    try:
        from babel import Locale

        return str(Locale.parse(token).english_name)
    except Exception:  # noqa: BLE001 - a token CLDR does not know ('haw' is known; 'jw' is not)
        return token


def routes_of(default_ref: str, language_models: dict[str, str], recognizer: Recognizer) -> dict[str, Route]:
    """Every language code a default model (``default_ref``) and per-language models serve, with how; each route
    carries ``recognizer``."""
    out: dict[str, Route] = {}
    for code in LISTED_TRANSCRIPTION_CODES:
        if on_base(code):
            out[code] = Route(code, DEFAULT_MODEL, default_ref, whisper_token(code), recognizer)
    for code, ref in language_models.items():
        out[code] = Route(code, code, ref, whisper_token(code), recognizer)
    if CODE_SWITCHED_ZULU not in out and "zul" in out:  # code-switched isiZulu runs on the isiZulu model
        zul = out["zul"]
        out[CODE_SWITCHED_ZULU] = Route(
            CODE_SWITCHED_ZULU, zul.model_key, zul.model_ref, zul.language_token, recognizer
        )
    return out


def route_in(routes: dict[str, Route], requested: str) -> Route:
    """The route for a requested language code (any accepted spelling) among Whisper's ``routes``.

    Raises :class:`UnsupportedLanguage` for an unknown code (``unknown=True``) or a known one without a
    model here; the caller names its request field (``.for_field("lang_code")``).
    """
    code = transcription_code(requested)
    if code in routes:
        return routes[code]
    available = ", ".join(sorted(routes))
    if code in TRANSCRIPTION_CODES:
        target = "zul" if code == CODE_SWITCHED_ZULU else code
        raise UnsupportedLanguage(
            code,
            f"({languages.speech_name(code)}) has no speech model on this server: Whisper base does not cover it. "
            f'An operator can configure one with {SETTING}=\'{{"{target}": "<model directory or Hugging '
            f"Face id>\"}}' (a faster-whisper / CTranslate2 Whisper model fine-tuned for "
            f"{languages.speech_name(target)}). Languages available now: {available}.",
        )
    raise UnsupportedLanguage(
        requested,
        f"Accepted codes: {', '.join(LISTED_TRANSCRIPTION_CODES)} (available on this server: {available}).",
        unknown=True,
    )


def detectable_of(routes: dict[str, Route]) -> dict[str, str]:
    """Whisper token -> code, for the languages auto-detection may answer among ``routes`` (a served language's kin
    too)."""
    out: dict[str, str] = {}
    for code, route in routes.items():
        if route.language_token and code != CODE_SWITCHED_ZULU:
            out.setdefault(route.language_token, code)
    for code in list(out.values()):
        lang = _registry(code)
        for kin in lang.whisper_kin if lang else ():
            out.setdefault(kin, code)
    return out

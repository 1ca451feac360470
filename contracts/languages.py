"""The one language registry: codes, names, aliases, NLLB and Whisper codes, and which capability covers what.

Every capability and route reads languages from here (language ID, search, transcription, translation, batch and
``/api/v1/models``). Codes are ISO 639-3 (``zul``); ``cs-zul`` is the spec's code-switched isiZulu, a
transcription variant that runs on the isiZulu model. What a *running* server really serves also depends on the
models installed; the deployments report that through ``/api/v1/models``.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.errors import UnsupportedLanguage


@dataclass(frozen=True)
class Language:
    code: str  # ISO 639-3, the canonical form everywhere inside the service
    name: str  # English name, as /api/v1/models shows it
    local_name: str  # the name speakers use (isiZulu), as search reports it
    iso1: str | None = None  # ISO 639-1, also a locale head (zu -> zu_ZA)
    nllb: str | None = None  # NLLB-200 code, None where NLLB-200 lacks the language
    whisper: str | None = None  # Whisper's language token, None where Whisper does not know the language
    whisper_base: bool = False  # transcribed by the default Whisper base model
    # Whisper languages its detector confuses this one with; their probability counts for it (Whisper base hears
    # much real Afrikaans as Dutch or German, neither of which is served here: scripts/eval_real.py)
    whisper_kin: tuple[str, ...] = ()
    text: bool = False  # identified by language ID and covered by the text capabilities
    aliases: tuple[str, ...] = ()  # other spellings clients send (lower case)


LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        Language(
            "nso",
            "Northern Sotho",
            "Sepedi (Northern Sotho)",
            None,
            "nso_Latn",
            text=True,
            aliases=("ped", "sepedi", "pedi", "northern sotho", "sesotho sa leboa"),
        ),
        Language(
            "afr",
            "Afrikaans",
            "Afrikaans",
            "af",
            "afr_Latn",
            "af",
            whisper_base=True,
            whisper_kin=("nl", "de"),
            text=True,
            aliases=("afrikaans",),
        ),
        Language(
            "sot",
            "Southern Sotho",
            "Sesotho",
            "st",
            "sot_Latn",
            text=True,
            aliases=("sesotho", "sotho", "southern sotho"),
        ),
        Language("ssw", "Swati", "siSwati", "ss", "ssw_Latn", text=True, aliases=("siswati", "swati")),
        Language("tso", "Tsonga", "Xitsonga", "ts", "tso_Latn", text=True, aliases=("xitsonga", "tsonga")),
        Language("tsn", "Tswana", "Setswana", "tn", "tsn_Latn", text=True, aliases=("setswana", "tswana")),
        Language("xho", "Xhosa", "isiXhosa", "xh", "xho_Latn", text=True, aliases=("xhosa", "isixhosa")),
        Language("zul", "Zulu", "isiZulu", "zu", "zul_Latn", text=True, aliases=("zulu", "isizulu")),
        Language(
            "eng", "English", "English", "en", "eng_Latn", "en", whisper_base=True, text=True, aliases=("english",)
        ),
        Language(
            "swh", "Swahili", "Kiswahili", "sw", "swh_Latn", "sw", text=True, aliases=("swa", "kiswahili", "swahili")
        ),
        Language("sna", "Shona", "chiShona", "sn", "sna_Latn", "sn", text=True, aliases=("shona", "chishona")),
        Language(
            "fra",
            "French",
            "French",
            "fr",
            "fra_Latn",
            "fr",
            whisper_base=True,
            text=True,
            aliases=("fre", "french", "francais", "français"),
        ),
        Language("ven", "Venda", "Tshivenda", "ve", "ven_Latn", aliases=("tshivenda", "venda")),
        Language("nbl", "Southern Ndebele", "isiNdebele", "nr", None, aliases=("isindebele", "ndebele")),
    )
}

CODE_SWITCHED_ZULU = "cs-zul"
# Transcription codes of the spec, in its order (cs-zul is isiZulu mixed with English).
TRANSCRIPTION_CODES: tuple[str, ...] = ("afr", "zul", "sot", "eng", "fra", CODE_SWITCHED_ZULU)
TRANSCRIPTION_NAMES = {
    "afr": "Afrikaans",
    "eng": "English (South African)",
    "fra": "French (African)",
    "zul": "isiZulu",
    "sot": "Sesotho",
    CODE_SWITCHED_ZULU: "Code-switched isiZulu (alpha)",
}
# The transcription codes in the order the service lists them (error texts, /api/v1/models): those the default
# Whisper base model covers, then those that need a configured model.
LISTED_TRANSCRIPTION_CODES: tuple[str, ...] = tuple(
    sorted(TRANSCRIPTION_CODES, key=lambda code: not (code in LANGUAGES and LANGUAGES[code].whisper_base))
)
# Languages the text capabilities (language ID, NER, sentiment, intent) know: the translation list plus French.
TEXT_CODES: tuple[str, ...] = tuple(code for code, lang in LANGUAGES.items() if lang.text)
# NLLB-200 codes the translation route accepts (the spec's list: our text languages less French).
TRANSLATION_NLLB_CODES: tuple[str, ...] = tuple(
    lang.nllb for code, lang in LANGUAGES.items() if lang.text and lang.nllb and code != "fra"
)
NLLB_TO_CODE = {lang.nllb: code for code, lang in LANGUAGES.items() if lang.nllb}

_NONE = ("", "auto", "none", "null", "any")
_ALIASES: dict[str, str] = {}
for _lang in LANGUAGES.values():
    _ALIASES[_lang.code] = _lang.code
    _ALIASES[_lang.name.lower()] = _lang.code
    _ALIASES[_lang.local_name.lower()] = _lang.code
    if _lang.iso1:
        _ALIASES[_lang.iso1] = _lang.code
    if _lang.nllb:
        _ALIASES[_lang.nllb.lower()] = _lang.code
    for _alias in _lang.aliases:
        _ALIASES[_alias] = _lang.code
_TRANSCRIPTION_ALIASES = {"cs-zul": CODE_SWITCHED_ZULU, "cs_zul": CODE_SWITCHED_ZULU, "cs_zu": CODE_SWITCHED_ZULU}

ACCEPTED_HELP = (
    "a language of " + ", ".join(sorted(LANGUAGES)) + " written as ISO 639-3 (zul), ISO 639-1 (zu), "
    "a locale (zu_ZA, zu-ZA), an NLLB code (zul_Latn) or an English name (isiZulu)"
)


def lookup(value: str) -> str | None:
    """The ISO 639-3 code for any accepted spelling (``zu``, ``zul``, ``ZUL``, ``zul_Latn``, ``zu_ZA``,
    ``isiZulu``), or None when the spelling is unknown."""
    key = value.strip().lower().replace("-", "_")
    if key in _ALIASES:
        return _ALIASES[key]
    head = key.split("_")[0]
    return _ALIASES.get(head) if head != key else None


def normalise(value: str | None) -> str | None:
    """ISO 639-3 code; None/empty/``auto`` -> None (detect); an unknown spelling -> :class:`UnsupportedLanguage`."""
    if value is None or value.strip().lower() in _NONE:
        return None
    code = lookup(value)
    if code is None:
        raise UnsupportedLanguage(value, f"Use {ACCEPTED_HELP}.", unknown=True)
    return code


def transcription_code(value: str) -> str:
    """A transcription code: the registry's spellings plus ``cs-zul``, normalised (``ZU`` -> ``zul``). Codes the
    registry does not know are returned lower-cased, so a configured model for another language can be named."""
    key = value.strip().lower().replace(" ", "")
    if key in _TRANSCRIPTION_ALIASES:
        return _TRANSCRIPTION_ALIASES[key]
    return lookup(key) or key


def name(code: str) -> str:
    """The registry's English name ("Zulu"); text capabilities and search use it."""
    lang = LANGUAGES.get(code)
    return lang.name if lang else TRANSCRIPTION_NAMES[code]


def speech_name(code: str) -> str:
    """The name transcription uses, as the spec words it ("isiZulu", "English (South African)")."""
    return TRANSCRIPTION_NAMES.get(code) or LANGUAGES[code].name


def nllb_code(code: str) -> str | None:
    """NLLB-200 code of a registry code (``cs-zul`` translates as isiZulu); None where NLLB lacks it."""
    if code == CODE_SWITCHED_ZULU:
        code = "zul"
    lang = LANGUAGES.get(code)
    return lang.nllb if lang else None


def check_translation_code(value: str, field: str) -> str:
    """An NLLB code the translation route accepts, exactly as the client sent it, or the field's 400."""
    if value not in TRANSLATION_NLLB_CODES:
        raise UnsupportedLanguage(value, f"Accepted codes: {', '.join(TRANSLATION_NLLB_CODES)}.", field, unknown=True)
    return value

"""The models an operator adds to text analysis (``khuluma models pull``): where a setting's model is, and which
languages it is routed.

A setting names a model by its registered name, a Hugging Face id or a directory. The languages it reads are the
setting's (``text.ner_model_languages``, ``text.sentiment_model_languages``), else those the catalogue says it was
trained on (``engines.models.catalogue.KNOWN_MODELS``), else the default of the capability.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contracts.languages import TEXT_CODES
from engines.models.catalogue import KnownModel, catalogued
from engines.models.registry import ModelError, ModelRegistry
from engines.models.resolve import resolve


@dataclass(frozen=True)
class ConfiguredModel:
    ref: str  # as the setting names it
    path: str  # what transformers loads: a directory, or the Hugging Face id when nothing local matches
    languages: frozenset[str]  # the text languages routed to it
    known: KnownModel | None  # its catalogue entry (licence, published figures), if any


def configured_model(
    ref: str, capability: str, data_dir: Path | str, languages: list[str] | None, default: frozenset[str]
) -> ConfiguredModel:
    """Resolve ``ref`` through the model registry (never downloads) and decide its languages."""
    registry = ModelRegistry(data_dir)
    try:
        entry = resolve(registry, ref, capability, prefer="transformers")
        path, source = entry.path, entry.source
    except ModelError:
        if "/" not in ref or Path(ref).exists():
            raise
        path, source = ref, ref  # a Hugging Face id in transformers' own cache (a machine with access)
    known = catalogued(ref) or catalogued(source)
    if languages is not None:
        routed = frozenset(languages)
    elif known is not None and known.languages:
        routed = frozenset(known.languages)
    else:
        routed = default
    unknown = sorted(routed - set(TEXT_CODES))
    if unknown:
        raise ModelError(f"{capability} model {ref!r}: unknown text language(s) {', '.join(unknown)}.")
    return ConfiguredModel(ref, path, routed, known)


NON_ENGLISH = frozenset(code for code in TEXT_CODES if code != "eng")

"""The speech-model families, in the order they are asked, and the recognizers built from the settings.

``speech.language_models`` (``KHULUMA_SPEECH_LANGUAGE_MODELS``) maps a language to a model: a registered name, a
directory, or a Hugging Face id Whisper can load from its cache. :func:`resolve` locates each value and asks the
families in :data:`FAMILIES`' order which one it is (``Family.claims``, from its files alone):

- Whisper (``engines.speech.whisper.family``): a faster-whisper (CTranslate2) directory, or a value that names no
  directory (a hub id);
- CTC (``engines.speech.ctc.family``): sherpa-onnx's ONNX layout, or a ``*ForCTC`` checkpoint (wav2vec2, MMS,
  w2v-BERT).

A value no family claims is :class:`Unavailable`, naming what each family accepts. Each family then builds its
recognizer from the models routed to it (``Family.build``); Whisper always builds one, whose default model serves
Afrikaans, English and French and whose detector is the pipeline's. :func:`register` adds a family (a test's, or a
new family's module): docs/architecture.md, "Adding a speech-model family".
"""

from __future__ import annotations

from pathlib import Path

from contracts.errors import Unavailable
from contracts.installs import MODEL_SETTING
from contracts.languages import transcription_code
from engines.models.registry import ModelError, ModelRegistry
from engines.speech.ctc.family import CTCFamily
from engines.speech.recognition import Family, FamilySettings, Located, Recognizer
from engines.speech.whisper.family import WhisperFamily

SETTING = MODEL_SETTING["speech"]  # KHULUMA_SPEECH_LANGUAGE_MODELS

FAMILIES: list[Family] = [WhisperFamily(), CTCFamily()]


def register(family: Family) -> None:
    """Add ``family`` to those asked, after the others (a language routed to one of its models is served by it)."""
    if family not in FAMILIES:
        FAMILIES.append(family)


def unregister(family: Family) -> None:
    if family in FAMILIES:
        FAMILIES.remove(family)


def resolve(settings: FamilySettings) -> list[Recognizer]:
    """The recognizers of ``settings``, in the families' order (a later family's route for a language wins)."""
    registry = ModelRegistry(settings.data_dir)
    routed: list[list[Located]] = [[] for _ in FAMILIES]
    for language, ref in settings.speech.language_models.items():
        model = locate(registry, transcription_code(language), ref)
        index = next((i for i, family in enumerate(FAMILIES) if family.claims(model)), None)
        if index is None:
            accepted = "; ".join(f"{family.name}: {family.accepts}" for family in FAMILIES)
            raise Unavailable(
                f"The speech model routed to '{model.code}' in {SETTING}, {ref}, is not a model of any speech "
                f"family here. Accepted: {accepted}"
            )
        routed[index].append(model)
    built = (family.build(models, settings) for family, models in zip(FAMILIES, routed, strict=True))
    return [recognizer for recognizer in built if recognizer is not None]


def locate(registry: ModelRegistry, code: str, ref: str) -> Located:
    """The directory a setting's value names (a registered model, or a directory) and where it came from."""
    try:
        entry = registry.get(ref)
    except ModelError:
        entry = None
    if entry is not None:
        return Located(code, ref, Path(entry.path), entry.source)
    path = Path(ref).expanduser()
    if path.is_dir():
        return Located(code, ref, path, str(path.resolve()))
    return Located(code, ref, None, ref)

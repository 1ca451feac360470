"""The CTC family as the family list (``engines.speech.families``) asks it: a directory in sherpa-onnx's ONNX
layout (an ONNX model or ``tokens.txt``) or a Hugging Face checkpoint of a ``*ForCTC`` architecture is a CTC model
(``engines.models.ctc_layout`` then says what it lacks, if anything); its recognizer serves every language routed
to such a directory."""

from __future__ import annotations

import json
from pathlib import Path

from contracts.errors import Unavailable
from contracts.installs import MODEL_SETTING
from engines.models.catalogue import catalogued
from engines.models.ctc_layout import LAYOUT_HELP, ONNX_MODELS, TOKENS
from engines.speech.ctc.models import CTCModel, CTCModels
from engines.speech.ctc.recognizer import CTCRecognizer
from engines.speech.recognition import FamilySettings, Located

SETTING = MODEL_SETTING["speech"]  # KHULUMA_SPEECH_LANGUAGE_MODELS


class CTCFamily:
    name = "ctc"
    accepts = LAYOUT_HELP

    def claims(self, model: Located) -> bool:
        path = model.path
        if path is None:
            return False
        if (path / TOKENS).is_file() or any((path / f).is_file() for f in ONNX_MODELS):
            return True
        return _names_ctc_architecture(path / "config.json")

    def build(self, routed: list[Located], settings: FamilySettings) -> CTCModels | None:
        """One :class:`CTCRecognizer` per directory, whatever the number of languages routed to it."""
        if not routed:
            return None
        loaded: dict[Path, CTCModel] = {}
        models: dict[str, CTCModel] = {}
        for model in routed:
            assert model.path is not None  # claimed: a directory
            found = loaded.get(model.path.resolve())
            if found is None:
                found = loaded[model.path.resolve()] = _loaded(model, settings.speech.ctc_cpu_threads)
            models[model.code] = found
        return CTCModels(models)


def _loaded(model: Located, cpu_threads: int) -> CTCModel:
    """The model at ``model.path`` (checked, not loaded), with what the catalogue knows of it."""
    assert model.path is not None
    known = catalogued(model.source)
    name = Path(model.ref).name if "/" in model.ref else model.ref
    try:
        recognizer = CTCRecognizer(model.path, cpu_threads=cpu_threads, name=name)
    except Unavailable as exc:
        raise Unavailable(f"The speech model routed to '{model.code}' in {SETTING}: {exc.detail}") from None
    return CTCModel(recognizer, model.source, known.licence if known else None, known.published if known else "")


def _names_ctc_architecture(config: Path) -> bool:
    """Whether a Hugging Face ``config.json`` names a ``*ForCTC`` architecture."""
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return False
    return any(isinstance(a, str) and a.endswith("ForCTC") for a in architectures)

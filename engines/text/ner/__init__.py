"""Named-entity recognition with character offsets (``text[start:end] == word`` always), one module per reason
to change:

- ``entities``: the :class:`Entity` every recogniser answers, label names, offset helpers;
- ``spacy_ner``: English, spaCy ``en_core_web_sm`` (MIT), with ``english_rules`` (what the small English model does
  not know about South African text: an entity ruler ahead of it, name shapes, places by context);
- ``transformers_ner``: a configured Hugging Face token-classification model (``text.ner_model``);
- ``heuristic``: the offline fallback for the African languages (not a trained model);
- ``router``: :class:`EntityRecogniser`, which sends each sentence to the recogniser of its language.

The word lists they share are ``engines/text/gazetteers.py``, loaded once per process.
"""

from engines.text.ner.entities import Entity, map_label
from engines.text.ner.heuristic import HEURISTIC_LANGUAGES, HeuristicNER
from engines.text.ner.router import EntityRecogniser
from engines.text.ner.spacy_ner import SpacyNER
from engines.text.ner.transformers_ner import TransformersNER

__all__ = [
    "HEURISTIC_LANGUAGES",
    "Entity",
    "EntityRecogniser",
    "HeuristicNER",
    "SpacyNER",
    "TransformersNER",
    "map_label",
]

"""Entity recognition with the offline recognisers, as one pass over a group of texts: language identification,
then each sentence to the recogniser of its language (``engines/text/ner/router.py``), answered as the contract's
:class:`~contracts.text.Entity`. The TextAnalysis deployment runs it, and so may the ingress itself
(``text.ner_in_ingress``: docs/architecture.md, engines served in the ingress)."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.text import Entity
from engines.text.langid import LanguageIdentifier
from engines.text.ner import Entity as Found
from engines.text.ner import EntityRecogniser


def as_contract(found: Iterable[Found]) -> list[Entity]:
    return [Entity(entity=e.entity, word=e.word, start=e.start, end=e.end) for e in found]


class OfflineEntityPass:
    """Language ID and the offline recognisers (spaCy's English NER, the rules of the other languages): no
    configured transformer model."""

    def __init__(self) -> None:
        self.langid = LanguageIdentifier()
        self.recogniser = EntityRecogniser(identifier=self.langid)

    def entities(self, texts: list[str]) -> list[list[Entity]]:
        """The entities of each text, offsets into the text as given."""
        return [as_contract(found) for found in self.recogniser.recognise_routed(texts, self.langid)]

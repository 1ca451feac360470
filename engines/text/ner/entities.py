"""What every recogniser answers: :class:`Entity` (character offsets, ``text[start:end] == word`` always), the label
names mapped to ours (lower case: person, location, organisation, date; spaCy adds time, money, ...), and the helpers
that keep offsets true (:func:`entity_at`, :func:`on_composed`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from engines.text.utils import nfc_with_offsets, original_span, trim_span


@dataclass(frozen=True)
class Entity:
    entity: str
    word: str
    start: int
    end: int
    recogniser: str = ""  # what found it: a model's name, "entity ruler (gazetteers)", "name shape" ...


class NerBackend(Protocol):
    name: str

    def recognise(self, texts: list[str]) -> list[list[Entity]]: ...


# Label names of spaCy / CoNLL / MasakhaNER / OntoNotes, mapped to our lower-case names.
LABEL_NAMES = {
    "PER": "person",
    "PERSON": "person",
    "LOC": "location",
    "GPE": "location",
    "FAC": "location",
    "ORG": "organisation",
    "NORP": "group",
    "DATE": "date",
    "TIME": "time",
    "MONEY": "money",
    "PERCENT": "percent",
    "QUANTITY": "quantity",
    "CARDINAL": "number",
    "ORDINAL": "ordinal",
    "EVENT": "event",
    "PRODUCT": "product",
    "WORK_OF_ART": "work_of_art",
    "LAW": "law",
    "LANGUAGE": "language",
    "MISC": "misc",
}


def map_label(label: str) -> str:
    return LABEL_NAMES.get(label.upper(), label.lower())


def entity_at(text: str, label: str, start: int, end: int, recogniser: str = "") -> Entity | None:
    start, end = trim_span(text, start, end)
    return Entity(map_label(label), text[start:end], start, end, recogniser) if end > start else None


def on_composed(texts: list[str], recognise: Callable[[list[str]], list[list[Entity]]]) -> list[list[Entity]]:
    """``recognise`` run on the texts with each letter composed with its combining marks (NFC), its entities
    mapped back to the texts as sent: decomposed (NFD) input such as "Ma\\u0300ndela" is recognised as its
    composed form is, a word keeps its marks, and ``text[start:end] == word`` still holds."""
    prepared = [nfc_with_offsets(text) for text in texts]
    found = recognise([composed for composed, _ in prepared])
    out: list[list[Entity]] = []
    for text, (composed, offsets), entities in zip(texts, prepared, found):
        if composed is text:
            out.append(entities)
            continue
        mapped = []
        for e in entities:
            start, end = trim_span(text, *original_span(offsets, e.start, e.end))
            if end > start:
                mapped.append(Entity(e.entity, text[start:end], start, end, e.recogniser))
        out.append(mapped)
    return out

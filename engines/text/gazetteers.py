"""Word lists the text engines share, loaded once per process: what entity recognition and language ID know about
names, places, organisations, titles and noun-class prefixes.

The tables live in ``engines/text/artifacts/gazetteers/*.txt`` (one entry a line, ``#`` comments; each file says
where its entries come from), so changing a list is a data change, not a code change. Country, month and weekday
names in every locale of :data:`CLDR_LOCALES` come from the CLDR data shipped in ``babel``. Southern African place
names from GeoNames (CC BY 4.0) are in ``places_geonames.txt``, written by ``scripts/make_gazetteers.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from engines.text.utils import MARKS

FOLDER = Path(__file__).resolve().parent / "artifacts" / "gazetteers"
CLDR_LOCALES = ("zu", "xh", "ss", "nr", "nso", "st", "tn", "ts", "ve", "af", "sw", "sn", "fr", "en")

# A word made of a lower-case prefix (maybe with a hyphen) and a capitalised stem: uMandela, e-Durban, UThandi
PREFIXED = re.compile(rf"^(?P<prefix>[A-Za-z]?[a-z]{{0,6}})-?(?P<stem>[A-Z][\w{MARKS}'’-]*)$")


def read_list(name: str) -> tuple[str, ...]:
    """The entries of ``artifacts/gazetteers/<name>.txt`` in file order, comments and blank lines left out."""
    entries = []
    for line in (FOLDER / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            entries.append(entry)
    return tuple(entries)


@dataclass(frozen=True)
class Gazetteers:
    locative_prefixes: frozenset[str]
    person_prefixes: frozenset[str]
    other_prefixes: frozenset[str]
    honorifics: frozenset[str]  # lower case
    organisation_words: frozenset[str]  # lower case
    known_organisations: frozenset[str]  # as written
    places: frozenset[str]  # as written: the hand-written list, CLDR country names (and their prefix-less forms)
    southern_african_places: frozenset[str]  # the hand-written list alone
    date_words: frozenset[str]  # lower case: CLDR month and weekday names
    english_function_words: frozenset[str]
    common_word_organisations: frozenset[str]  # known organisations named by an everyday English word (Rain, Game)
    geonames_places: frozenset[str]  # southern African places and the world's largest cities, from GeoNames
    place_prepositions: frozenset[str]  # "in", "at", ... : what makes a known place name a place
    place_words: frozenset[str]  # "river", "street", ... : what makes a run of capitalised words a place

    @property
    def prefixes(self) -> frozenset[str]:
        return self.locative_prefixes | self.person_prefixes | self.other_prefixes


@lru_cache(maxsize=1)
def gazetteers() -> Gazetteers:
    places, dates = cldr_gazetteers()
    return Gazetteers(
        locative_prefixes=frozenset(read_list("prefixes_locative")),
        person_prefixes=frozenset(read_list("prefixes_person")),
        other_prefixes=frozenset(read_list("prefixes_other")),
        honorifics=frozenset(w.lower() for w in read_list("honorifics")),
        organisation_words=frozenset(w.lower() for w in read_list("organisation_words")),
        known_organisations=frozenset(read_list("known_organisations")),
        places=places,
        southern_african_places=frozenset(read_list("places_southern_africa")),
        date_words=dates,
        english_function_words=frozenset(w.lower() for w in read_list("english_function_words")),
        common_word_organisations=frozenset(read_list("organisations_common_words")),
        geonames_places=frozenset(read_list("places_geonames")),
        place_prepositions=frozenset(w.lower() for w in read_list("place_prepositions")),
        place_words=frozenset(w.lower() for w in read_list("place_words")),
    )


@lru_cache(maxsize=1)
def cldr_gazetteers() -> tuple[frozenset[str], frozenset[str]]:
    """(place names, date words): the hand-written southern African places, and from CLDR via babel the country
    names, months and weekdays of our locales."""
    from babel import Locale

    places: set[str] = set(read_list("places_southern_africa"))
    dates: set[str] = set()
    for code in CLDR_LOCALES:
        try:
            loc = Locale.parse(code)
        except Exception:  # noqa: BLE001 - a locale missing from this babel build
            continue
        for name in loc.territories.values():
            if 3 <= len(name) <= 40:
                places.add(name)
                prefixed = PREFIXED.match(name.split()[0])  # "iNingizimu Afrika" -> also "Ningizimu Afrika"
                if prefixed and prefixed.group("prefix"):
                    places.add(name[prefixed.start("stem") :])
        for table in (loc.months, loc.days):
            for context in table.values():
                # wide names only: abbreviations ("tsa", "mme", "lwa") are everyday words in Sotho-Tswana text
                for width in ("wide",):
                    for name in (context.get(width) or {}).values():
                        if len(name) >= 4:
                            dates.add(name.lower())
                            prefixed = PREFIXED.match(name)  # "UMsombuluko" -> also "msombuluko"
                            if prefixed and prefixed.group("prefix") and len(prefixed.group("stem")) >= 3:
                                dates.add(prefixed.group("stem").lower())
    return frozenset(places), frozenset(dates)

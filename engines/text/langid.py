"""Language identification for the registry's text languages (``contracts.languages.TEXT_CODES``: the 11 of the
translation list plus French).

Two models work together:

- ``lingua-language-detector`` (Apache-2.0), restricted to the ten of our languages it knows: afr, eng, fra, sna,
  sot, swh, tsn, tso, xho, zul. It has no Northern Sotho (nso) and no Swati (ssw).
- A character n-gram logistic-regression classifier trained by ``scripts/train_langid.py`` on Debian's
  LibreOffice localisations (``engines/text/artifacts/langid_ngram.npz``), covering afr, eng, fra, nso, sot, ssw,
  tsn, tso, xho, zul. It decides *within* the two families lingua cannot separate fully: the Sotho-Tswana
  family (nso/sot/tsn) and the Nguni family (ssw/zul/xho).

Names are no language's: an English sentence about Bheki Cele and Thandeka Gqubule in Umlazi is not isiZulu. Both
models judge a text by its words without its names (:func:`without_names`): capitalised words inside a sentence, a
run of capitalised words at its start, and words the gazetteers know as places or organisations. A text that is
nothing but names is judged whole.

Combination: lingua's probability mass for a family is shared out among the family's members. The n-gram model
decides the share of the member lingua lacks (nso, ssw); the rest is split between lingua's members by a weighted
geometric mean of lingua's and the n-gram model's probabilities (``LINGUA_WEIGHT``; 1.0 = lingua alone, which
scored best on the held-out UDHR sentences: see scripts/eval_text.py).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from contracts.languages import TEXT_CODES
from engines.text.gazetteers import gazetteers
from engines.text.utils import word_spans

ARTIFACT = Path(__file__).resolve().parent / "artifacts" / "langid_ngram.npz"

# lingua's names of the registry's text languages it knows (it has no nso and no ssw)
_LINGUA_NAMES = {
    "afr": "AFRIKAANS",
    "eng": "ENGLISH",
    "fra": "FRENCH",
    "sna": "SHONA",
    "sot": "SOTHO",
    "swh": "SWAHILI",
    "tsn": "TSWANA",
    "tso": "TSONGA",
    "xho": "XHOSA",
    "zul": "ZULU",
}
FAMILIES: tuple[tuple[str, ...], ...] = (("nso", "sot", "tsn"), ("ssw", "zul", "xho"))
# weight of lingua (vs the n-gram model) when splitting a family's mass between lingua's own members
LINGUA_WEIGHT = 1.0


@dataclass(frozen=True)
class LanguageGuess:
    language: str
    confidence: float
    candidates: list[tuple[str, float]] = field(default_factory=list)  # best first, scores sum to 1


@dataclass(frozen=True)
class LanguageSpan:
    start: int
    end: int
    text: str
    language: str


class NgramLanguageModel:
    """The committed character n-gram classifier (vocabulary + float16 weights, inference in numpy).

    Features are scikit-learn's ``CountVectorizer(analyzer="char_wb", lowercase=True)`` over the fixed vocabulary
    (what the model was trained with), computed here: importing scikit-learn would cost its memory in every
    process that identifies languages (docs/performance.md, figures behind the code).
    tests/unit/test_text_engines.py checks the two agree.
    """

    def __init__(self, path: Path = ARTIFACT) -> None:
        with np.load(path, allow_pickle=False) as data:
            vocabulary = [str(v) for v in data["vocabulary"]]
            self.coef = data["coef"].astype(np.float32)
            self.intercept = data["intercept"].astype(np.float32)
            meta = json.loads(str(data["meta"]))
        self.languages: list[str] = meta["languages"]
        self.source: str = meta.get("source", "")
        if meta.get("analyzer", "char_wb") != "char_wb":
            raise ValueError(f"{path}: only char_wb n-gram models are supported")
        self.ngram_range: tuple[int, int] = (int(meta["ngram_range"][0]), int(meta["ngram_range"][1]))
        self.vocabulary = {v: i for i, v in enumerate(vocabulary)}

    def features(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(vocabulary indices, counts) of the text's in-vocabulary n-grams."""
        counts = Counter(g for g in char_wb_ngrams(text.lower(), self.ngram_range) if g in self.vocabulary)
        indices = np.fromiter((self.vocabulary[g] for g in counts), dtype=np.intp, count=len(counts))
        return indices, np.fromiter(counts.values(), dtype=np.float32, count=len(counts))

    def probabilities(self, texts: list[str]) -> np.ndarray:
        """(n, len(languages)) class probabilities."""
        logits = np.zeros((len(texts), len(self.languages)), dtype=np.float32)
        for row, text in enumerate(texts):
            indices, counts = self.features(text)
            if not indices.size:
                continue
            weights = 1.0 + np.log(counts)  # sublinear term frequency, then unit length
            logits[row] = self.coef[:, indices] @ weights / np.sqrt(np.dot(weights, weights))
        logits += self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)


_SENTENCE_MARK = re.compile(r"[.!?:;\n]")
MIN_WORD_LETTERS = 2  # a text is judged without its names when at least one word of this many letters is left


def without_names(text: str) -> str:
    """``text``'s words without its names: capitalised words inside a sentence ("I" stays), a capitalised word that
    opens a sentence when another capitalised word follows it (Bheki Cele ...), and any word or two-word run the
    gazetteers know as a place or an organisation. Words a noun-class prefix starts in lower case (uMandela,
    eThekwini) stay: the prefix is the language's. Empty when nothing but names is left."""
    known = _known_names()
    words = word_spans(text)
    kept: list[str] = []
    skip_next = False
    for i, word in enumerate(words):
        if skip_next:
            skip_next = False
            continue
        following = words[i + 1] if i + 1 < len(words) else None
        pair = f"{word.text} {following.text}" if following else ""
        if pair in known:
            skip_next = True
            continue
        if word.text in known:
            continue
        capitalised = word.text[:1].isupper() and word.text != "I"
        opens = i == 0 or bool(_SENTENCE_MARK.search(text[words[i - 1].end : word.start]))
        if capitalised and not word.text.isupper() and (not opens or (following and following.text[:1].isupper())):
            continue
        kept.append(word.text)
    judged = " ".join(kept)
    return judged if any(len(w) >= MIN_WORD_LETTERS and w.isalpha() for w in kept) else ""


def _known_names() -> frozenset[str]:
    g = gazetteers()
    return g.places | g.known_organisations


_RUNS_OF_WHITESPACE = re.compile(r"\s\s+")


def char_wb_ngrams(text: str, ngram_range: tuple[int, int]) -> list[str]:
    """Character n-grams inside word boundaries, each word padded with a space (scikit-learn's ``char_wb``)."""
    low, high = ngram_range
    grams: list[str] = []
    for word in _RUNS_OF_WHITESPACE.sub(" ", text).split():
        padded = f" {word} "
        for n in range(low, high + 1):
            if len(padded) <= n:  # a word shorter than n counts once, whole, and ends the word's n-grams
                grams.append(padded)
                break
            grams.extend(padded[i : i + n] for i in range(len(padded) - n + 1))
    return grams


class LanguageIdentifier:
    """``detect(text)`` and ``detect_spans(text)`` over the registry's text languages."""

    def __init__(self, artifact: Path = ARTIFACT) -> None:
        from lingua import Language, LanguageDetectorBuilder

        self._lingua_lang = {code: getattr(Language, name) for code, name in _LINGUA_NAMES.items()}
        self._code_of = {lang: code for code, lang in self._lingua_lang.items()}
        self._lingua = (
            LanguageDetectorBuilder.from_languages(*self._lingua_lang.values()).with_preloaded_language_models().build()
        )
        self.ngram = NgramLanguageModel(artifact)
        self._lock = threading.Lock()

    @property
    def languages(self) -> list[str]:
        return list(TEXT_CODES)

    def detect(self, text: str) -> LanguageGuess:
        return self.detect_many([text])[0]

    def detect_many(self, texts: list[str]) -> list[LanguageGuess]:
        """Each text's language, judged by its words without its names (:func:`without_names`)."""
        if not texts:
            return []
        texts = [without_names(text) or text for text in texts]
        ngram = self.ngram.probabilities(texts)
        with self._lock:
            lingua = self._lingua.compute_language_confidence_values_in_parallel(texts)
        guesses = []
        for values, row in zip(lingua, ngram):
            scores = dict.fromkeys(TEXT_CODES, 0.0)
            for value in values:
                scores[self._code_of[value.language]] = float(value.value)
            if not any(scores.values()):  # lingua found no letters: fall back to the n-gram model alone
                scores.update({code: float(p) for code, p in zip(self.ngram.languages, row)})
            self._resolve_families(scores, dict(zip(self.ngram.languages, row.tolist())))
            ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
            total = sum(s for _, s in ranked) or 1.0
            ranked = [(code, s / total) for code, s in ranked]
            guesses.append(LanguageGuess(ranked[0][0], ranked[0][1], ranked))
        return guesses

    @staticmethod
    def _resolve_families(
        scores: dict[str, float], ngram: dict[str, float], lingua_weight: float = LINGUA_WEIGHT
    ) -> None:
        """Share each family's lingua mass out among its members (see the module docstring)."""
        for family in FAMILIES:
            mass = sum(scores[c] for c in family)
            if mass <= 0:
                continue
            ngram_total = sum(ngram.get(c, 0.0) for c in family) or 1.0
            q_ngram = {c: max(ngram.get(c, 0.0) / ngram_total, 1e-9) for c in family}
            known = [c for c in family if c in _LINGUA_NAMES]
            share = sum(q_ngram[c] for c in known)  # the n-gram model's weight for lingua's members
            mixed = {
                c: (scores[c] / mass + 1e-9) ** lingua_weight * (q_ngram[c] / share) ** (1 - lingua_weight)
                for c in known
            }
            mixed_total = sum(mixed.values())
            for code in family:
                weight = share * mixed[code] / mixed_total if code in mixed else q_ngram[code]
                scores[code] = mass * weight

    def detect_spans(self, text: str, min_words: int = 3) -> list[LanguageSpan]:
        """Per-span languages for code-switched text (lingua's multi-language detection, families resolved)."""
        with self._lock:
            results = self._lingua.detect_multiple_languages_of(text)
        spans: list[LanguageSpan] = []
        pieces = [(r.start_index, r.end_index) for r in results]
        for start, end in pieces:
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if start >= end:
                continue
            piece = text[start:end]
            if spans and len(piece.split()) < min_words:  # too short to trust alone: join the previous span
                prev = spans.pop()
                start, piece = prev.start, text[prev.start : end]
            spans.append(LanguageSpan(start, end, piece, self.detect(piece).language))
        merged: list[LanguageSpan] = []
        for span in spans:
            if merged and merged[-1].language == span.language:
                prev = merged.pop()
                span = LanguageSpan(prev.start, span.end, text[prev.start : span.end], span.language)
            merged.append(span)
        return merged

"""NLLB-200 translation: CTranslate2 (default) or transformers, with sentence splitting and batched decoding.

NLLB conventions, shared by both backends:
- source tokens: ``[src_lang] + sentencepiece pieces + ["</s>"]`` (the non-legacy NLLB tokenizer layout);
- the target language is forced as the first decoded token (CTranslate2 ``target_prefix``, transformers
  ``forced_bos_token_id``);
- a text is split into sentences (then clauses, then word chunks when a sentence is very long), all sentences of
  all texts of a batch are decoded in ONE model call, and each text is re-joined with its original whitespace.

:meth:`Translator.translate_batch` returns, per text, the decoded tokens of every segment (language token first)
so callers and tests can see exactly what the model produced.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

from contracts.errors import InvalidInput

LANG_TOKEN = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")  # NLLB language tokens, e.g. zul_Latn
CONTROL_TOKENS = frozenset({"<s>", "</s>", "<pad>", "<unk>", "<mask>"})
EOS = "</s>"


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int = 2
    max_length: int = 256  # generated tokens per segment
    max_batch_size: int = 32  # segments per model call chunk (sorted by length to limit padding)
    max_segment_words: int = 80  # longer sentences are split at clauses, then into word chunks


# ---------------------------------------------------------------------------------------------- sentences


@dataclass(frozen=True)
class Piece:
    """One segment of a text: ``text`` is translated, ``trailing`` (whitespace) is kept as it was."""

    text: str
    trailing: str = ""


_SENTENCE_END = re.compile(r"[.!?…。]+[\"'”’»)\]]*(?=\s|$)|\n")
_CLAUSE_END = re.compile(r"[,;:](?=\s)")
# Words after which a full stop does not end the sentence (English and Afrikaans titles, months, ...).
_ABBREVIATION_WORDS = (
    "mr mrs ms dr prof st mt no nr vs etc e.g i.e cf mnr mev me dkt ds adv jan feb mar apr jun jul aug sep sept "
    "oct nov dec"
)
_ABBREVIATIONS = frozenset(_ABBREVIATION_WORDS.split())


def split_sentences(text: str, max_words: int = 80) -> tuple[str, list[Piece]]:
    """Split into sentences; returns (leading whitespace, pieces), and round-trips exactly:
    ``lead + "".join(p.text + p.trailing for p in pieces) == text``.

    Sentences end at . ! ? … (followed by whitespace or the end; not after a known abbreviation or an initial)
    and at line breaks. A sentence longer than ``max_words`` is cut at clause punctuation, then into word chunks.
    """
    cuts: list[int] = []
    prev = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.start() if match.group() == "\n" else match.end()
        if match.group() == "." and _is_abbreviation(text[prev:end]):
            continue
        cuts.append(end)
        prev = end
    lead, sentences = _cut(text, cuts)
    pieces: list[Piece] = []
    for sentence in sentences:
        pieces.extend(_split_long(sentence, max_words))
    return lead, pieces


def _cut(text: str, cuts: list[int]) -> tuple[str, list[Piece]]:
    """Cut ``text`` at ``cuts``; whitespace around each cut goes to the preceding piece's ``trailing``."""
    lead = ""
    pieces: list[Piece] = []
    prev = 0
    for cut in [*cuts, len(text)]:
        chunk, prev = text[prev:cut], cut
        core = chunk.strip()
        head = chunk[: len(chunk) - len(chunk.lstrip())] if core else chunk
        if pieces:
            pieces[-1] = Piece(pieces[-1].text, pieces[-1].trailing + head)
        else:
            lead += head
        if core:
            pieces.append(Piece(core, chunk[len(head) + len(core) :]))
    return lead, pieces


def _is_abbreviation(sentence: str) -> bool:
    words = sentence.split()
    if not words:
        return False
    last = words[-1].rstrip(".").lower()
    return last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())


def _split_long(piece: Piece, max_words: int) -> list[Piece]:
    if len(piece.text.split()) <= max_words:
        return [piece]
    _, clauses = _cut(piece.text, [m.end() for m in _CLAUSE_END.finditer(piece.text)])
    out: list[Piece] = []
    for clause in clauses:
        word_ends = [m.end() for m in re.finditer(r"\S+", clause.text)]
        _, chunks = _cut(clause.text, word_ends[max_words - 1 : -1 : max_words])
        chunks[-1] = Piece(chunks[-1].text, chunks[-1].trailing + clause.trailing)
        out.extend(chunks)
    out[-1] = Piece(out[-1].text, out[-1].trailing + piece.trailing)
    return out


def join_pieces(lead: str, pieces: Sequence[Piece], translations: Sequence[str]) -> str:
    return lead + "".join(t + p.trailing for p, t in zip(pieces, translations, strict=True))


# ---------------------------------------------------------------------------------------------- results


@dataclass
class SegmentTranslation:
    source: str
    tokens: list[str]  # decoded tokens, target language token first (as the model produced them)
    text: str


@dataclass
class TranslationOutput:
    text: str
    segments: list[SegmentTranslation] = field(default_factory=list)
    model: str = ""


Request = tuple[str, str, str]  # (text, source language, target language)


class Translator(Protocol):
    name: str
    backend: str
    device: str
    compute_type: str
    languages: frozenset[str]  # the NLLB language tokens of the model's vocabulary
    options: DecodeOptions

    def unsupported(self, *codes: str) -> InvalidInput | None: ...

    def check_languages(self, *codes: str) -> None: ...

    def translate_batch(self, requests: Sequence[Request]) -> list[TranslationOutput]: ...


class _SegmentingTranslator:
    """Splits texts, decodes all segments in one call (:meth:`_decode`), joins them back."""

    name: str
    backend: str
    device: str
    compute_type: str
    languages: frozenset[str]
    options: DecodeOptions

    def __init__(self, model_dir: Path | str, name: str | None, options: DecodeOptions) -> None:
        self.model_dir = Path(model_dir)
        self.name = name or self.model_dir.name
        self.options = options

    def unsupported(self, *codes: str) -> InvalidInput | None:
        """The 400 for codes this model has no language token for (the model decides what it serves), or None."""
        missing = [c for c in codes if c not in self.languages]
        if not missing:
            return None
        return InvalidInput(f"The installed translation model {self.name} does not support {', '.join(missing)}.")

    def check_languages(self, *codes: str) -> None:
        error = self.unsupported(*codes)
        if error is not None:
            raise error

    def translate_batch(self, requests: Sequence[Request]) -> list[TranslationOutput]:
        plans = []
        flat: list[Request] = []
        for text, src, tgt in requests:
            self.check_languages(src, tgt)
            lead, pieces = split_sentences(text, self.options.max_segment_words)
            plans.append((lead, pieces))
            flat.extend((p.text, src, tgt) for p in pieces)
        decoded = self._decode(flat) if flat else []
        outputs: list[TranslationOutput] = []
        at = 0
        for lead, pieces in plans:
            segments = []
            for piece in pieces:
                tokens, text = decoded[at]
                segments.append(SegmentTranslation(piece.text, tokens, text))
                at += 1
            outputs.append(
                TranslationOutput(join_pieces(lead, pieces, [s.text for s in segments]), segments, self.name)
            )
        return outputs

    def _decode(self, segments: Sequence[Request]) -> list[tuple[list[str], str]]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------- CTranslate2


class _SentencePiece:
    def __init__(self, path: Path) -> None:
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor(model_file=str(path))

    def encode(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def decode(self, pieces: list[str]) -> str:
        return self._sp.decode(pieces)


class _HFTokenizerJson:
    """tokenizer.json through the `tokenizers` library, for converted models shipped without the .model file."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))

    def encode(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def decode(self, pieces: list[str]) -> str:
        ids = [self._tok.token_to_id(p) for p in pieces]
        return self._tok.decode([i for i in ids if i is not None])


def read_ct2_vocabulary(model_dir: Path) -> list[str]:
    for name in ("shared_vocabulary.json", "target_vocabulary.json"):
        if (model_dir / name).is_file():
            return json.loads((model_dir / name).read_text())
    for name in ("shared_vocabulary.txt", "target_vocabulary.txt"):
        if (model_dir / name).is_file():
            return (model_dir / name).read_text(encoding="utf-8").splitlines()
    raise FileNotFoundError(f"No vocabulary file in {model_dir}")


def resolve_compute_type(compute_type: str) -> str | dict[str, str]:
    """``auto``: int8 on CPU, float16 on CUDA (NLLB's recommended CTranslate2 settings)."""
    return {"cpu": "int8", "cuda": "float16"} if compute_type == "auto" else compute_type


class _CTranslate2Model(_SegmentingTranslator):
    """A translator whose model runs in CTranslate2: a subclass sets ``tokenizer`` and ``_special`` (the tokens
    that are never text), opens the model with :meth:`_open` and decodes with :meth:`_beam_search`."""

    tokenizer: _SentencePiece | _HFTokenizerJson
    _special: frozenset[str] | set[str]

    def _open(self, device: str, compute_type: str, threads: int) -> None:
        import ctranslate2

        self.translator = ctranslate2.Translator(
            str(self.model_dir),
            device=device,
            compute_type=resolve_compute_type(compute_type),
            inter_threads=1,
            intra_threads=threads,
        )
        self.device = self.translator.device
        self.compute_type = self.translator.compute_type

    def _beam_search(self, sources: list[list[str]], target_prefix: list[list[str]] | None = None) -> list[list[str]]:
        """The best hypothesis of each source, as tokens."""
        results = self.translator.translate_batch(
            sources,
            target_prefix=target_prefix,
            beam_size=self.options.beam_size,
            max_decoding_length=self.options.max_length,
            max_batch_size=self.options.max_batch_size,
        )
        return [list(result.hypotheses[0]) for result in results]

    def _with_text(self, tokens: list[str]) -> tuple[list[str], str]:
        return tokens, self.tokenizer.decode([t for t in tokens if t not in self._special])


class CTranslate2Translator(_CTranslate2Model):
    backend = "ctranslate2"
    family = "NLLB-200"

    def __init__(
        self,
        model_dir: Path | str,
        name: str | None = None,
        options: DecodeOptions = DecodeOptions(),
        device: str = "auto",
        compute_type: str = "auto",
        threads: int = 0,
    ) -> None:
        super().__init__(model_dir, name, options)
        if (self.model_dir / "sentencepiece.bpe.model").is_file():
            self.tokenizer = _SentencePiece(self.model_dir / "sentencepiece.bpe.model")
        elif (self.model_dir / "tokenizer.json").is_file():
            self.tokenizer = _HFTokenizerJson(self.model_dir / "tokenizer.json")
        else:
            raise FileNotFoundError(f"{self.model_dir} has neither sentencepiece.bpe.model nor tokenizer.json")
        vocabulary = read_ct2_vocabulary(self.model_dir)
        self.languages = frozenset(t for t in vocabulary if LANG_TOKEN.match(t))
        self._special = self.languages | CONTROL_TOKENS
        self._open(device, compute_type, threads)

    def source_tokens(self, text: str, src: str) -> list[str]:
        return [src, *self.tokenizer.encode(text), EOS]

    def _decode(self, segments: Sequence[Request]) -> list[tuple[list[str], str]]:
        sources = [self.source_tokens(text, src) for text, src, _ in segments]
        prefixes = [[tgt] for _, _, tgt in segments]
        return [self._with_text(tokens) for tokens in self._beam_search(sources, prefixes)]


# ---------------------------------------------------------------------------------------------- transformers


class TransformersTranslator(_SegmentingTranslator):
    """``AutoModelForSeq2SeqLM`` for checkpoints CTranslate2 cannot convert (needs the `transformers` extra)."""

    backend = "transformers"
    family = "NLLB-200"

    def __init__(
        self,
        model_dir: Path | str,
        name: str | None = None,
        options: DecodeOptions = DecodeOptions(),
        device: str = "auto",
        threads: int = 0,
    ) -> None:
        import torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        super().__init__(model_dir, name, options)
        if threads:
            torch.set_num_threads(threads)
        self.device = "cuda" if device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        dtype = torch.float16 if self.device == "cuda" else torch.float32
        self.model = AutoModelForSeq2SeqLM.from_pretrained(self.model_dir, dtype=dtype).to(self.device).eval()
        self.compute_type = str(dtype).removeprefix("torch.")
        self.languages = frozenset(t for t in self.tokenizer.get_vocab() if LANG_TOKEN.match(t))
        self._lock = threading.Lock()  # the tokenizer's src_lang is state

    def _decode(self, segments: Sequence[Request]) -> list[tuple[list[str], str]]:
        import torch

        out: dict[int, tuple[list[str], str]] = {}
        groups: dict[tuple[str, str], list[int]] = {}
        for i, (_, src, tgt) in enumerate(segments):
            groups.setdefault((src, tgt), []).append(i)
        size = self.options.max_batch_size
        for (src, tgt), indexes in groups.items():
            for chunk_start in range(0, len(indexes), size):
                chunk = indexes[chunk_start : chunk_start + size]
                with self._lock:
                    self.tokenizer.src_lang = src
                    inputs = self.tokenizer([segments[i][0] for i in chunk], return_tensors="pt", padding=True)
                inputs = inputs.to(self.device)
                with torch.inference_mode():
                    generated = self.model.generate(
                        **inputs,
                        forced_bos_token_id=self.tokenizer.convert_tokens_to_ids(tgt),
                        num_beams=self.options.beam_size,
                        do_sample=False,
                        max_new_tokens=self.options.max_length,
                    )
                for i, row in zip(chunk, generated.tolist(), strict=True):
                    # a list of ids decodes to a list of tokens and to one string (the stubs allow both)
                    tokens = self._strip(cast(list[str], self.tokenizer.convert_ids_to_tokens(row)))
                    text = cast(str, self.tokenizer.decode(row, skip_special_tokens=True))
                    out[i] = (tokens, text)
        return [out[i] for i in range(len(segments))]

    def _strip(self, tokens: list[str]) -> list[str]:
        """Same shape as CTranslate2's hypotheses: no decoder start, no end token, no padding."""
        pad, eos = self.tokenizer.pad_token, self.tokenizer.eos_token
        if tokens and tokens[0] == eos:  # decoder start token
            tokens = tokens[1:]
        tokens = [t for t in tokens if t != pad]
        return tokens[:-1] if tokens and tokens[-1] == eos else tokens


def load_translator(
    path: Path | str,
    backend: str,
    name: str | None = None,
    options: DecodeOptions = DecodeOptions(),
    device: str = "auto",
    compute_type: str = "auto",
    threads: int = 0,
) -> Translator:
    if backend == "ctranslate2":
        from engines.translation.madlad import MadladTranslator, is_madlad

        if is_madlad(read_ct2_vocabulary(Path(path))):
            return MadladTranslator(path, name, options, device, compute_type, threads)
        return CTranslate2Translator(path, name, options, device, compute_type, threads)
    if backend == "transformers":
        return TransformersTranslator(path, name, options, device, threads)
    raise ValueError(f"Unknown translation backend {backend!r} (ctranslate2 or transformers)")

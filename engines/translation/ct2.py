"""What the translators that run in CTranslate2 share (NLLB-200, ``nllb.py``; MADLAD-400, ``madlad.py``): the
tokenizer a converted directory ships, its vocabulary, and :class:`CTranslate2Model`, which opens the model and
runs one beam search over a batch of segments.

A family subclasses :class:`CTranslate2Model` with its tokenizer files (:attr:`CTranslate2Model.tokenizer_files`),
the languages and special tokens it reads from the vocabulary, and how a segment becomes source tokens
(:meth:`~engines.translation.translator.SegmentingTranslator._decode`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from engines.translation.translator import SegmentingTranslator


class SentencePieceTokenizer:
    def __init__(self, path: Path) -> None:
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor(model_file=str(path))

    def encode(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def decode(self, pieces: list[str]) -> str:
        return self._sp.decode(pieces)


class TokenizerJson:
    """tokenizer.json through the `tokenizers` library, for converted models shipped without the .model file."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))

    def encode(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def decode(self, pieces: list[str]) -> str:
        ids = [self._tok.token_to_id(p) for p in pieces]
        return self._tok.decode([i for i in ids if i is not None])


def open_tokenizer(model_dir: Path, sentencepiece_files: Iterable[str]) -> SentencePieceTokenizer | TokenizerJson:
    """The first of ``sentencepiece_files`` the directory has, else its ``tokenizer.json``."""
    names = tuple(sentencepiece_files)
    for name in names:
        if (model_dir / name).is_file():
            return SentencePieceTokenizer(model_dir / name)
    if (model_dir / "tokenizer.json").is_file():
        return TokenizerJson(model_dir / "tokenizer.json")
    raise FileNotFoundError(f"{model_dir} has neither {' nor '.join(names)} nor tokenizer.json")


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


class CTranslate2Model(SegmentingTranslator):
    """A translator whose model runs in CTranslate2. A family sets :attr:`family` and :attr:`tokenizer_files`, and
    says which languages and special tokens (never text) its vocabulary holds; it decodes with
    :meth:`_beam_search`."""

    backend = "ctranslate2"
    family = ""
    tokenizer_files: tuple[str, ...] = ()  # the SentencePiece model's names, tried before tokenizer.json

    def _load(self, device: str, compute_type: str, threads: int) -> None:
        self.tokenizer = open_tokenizer(self.model_dir, self.tokenizer_files)
        self.languages = self.languages_in(read_ct2_vocabulary(self.model_dir))
        self._special = self.special_tokens()
        self._open(device, compute_type, threads)

    def languages_in(self, vocabulary: list[str]) -> frozenset[str]:
        """The NLLB codes the model has a language token for."""
        raise NotImplementedError

    def special_tokens(self) -> frozenset[str]:
        """The tokens that are never text (control and language tokens), once :attr:`languages` is known."""
        raise NotImplementedError

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

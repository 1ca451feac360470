"""MADLAD-400 translation (Google, Apache-2.0: commercial use allowed) through CTranslate2.

A T5 model: the target language is a token written before the source text (``<2zu> Good morning``), and the
source language is not given at all. The API's NLLB codes are mapped to MADLAD's language tokens
(:data:`MADLAD_TOKENS`); a language whose token the model's vocabulary lacks is refused like an NLLB model's.
Sentence splitting, batching and re-joining are the NLLB translator's (``engines/translation/nllb.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engines.translation.nllb import (
    DecodeOptions,
    Request,
    _CTranslate2Model,
    _HFTokenizerJson,
    _SentencePiece,
    read_ct2_vocabulary,
)

# NLLB code -> MADLAD-400's target-language token (ISO 639-1 where the language has one)
MADLAD_TOKENS = {
    "afr_Latn": "<2af>",
    "eng_Latn": "<2en>",
    "nso_Latn": "<2nso>",
    "sna_Latn": "<2sn>",
    "sot_Latn": "<2st>",
    "ssw_Latn": "<2ss>",
    "swh_Latn": "<2sw>",
    "tsn_Latn": "<2tn>",
    "tso_Latn": "<2ts>",
    "xho_Latn": "<2xh>",
    "zul_Latn": "<2zu>",
}
EOS = "</s>"
CONTROL = frozenset({"<s>", "</s>", "<pad>", "<unk>"})


def is_madlad(vocabulary: Sequence[str]) -> bool:
    """Whether a vocabulary is MADLAD-400's: target-language tokens such as ``<2zu>``."""
    return any(token in MADLAD_TOKENS.values() for token in vocabulary)


class MadladTranslator(_CTranslate2Model):
    backend = "ctranslate2"
    family = "MADLAD-400"

    def __init__(
        self,
        model_dir: Path | str,
        name: str | None = None,
        options: DecodeOptions = DecodeOptions(),  # noqa: B008 - frozen, as the NLLB translators' default
        device: str = "auto",
        compute_type: str = "auto",
        threads: int = 0,
    ) -> None:
        super().__init__(model_dir, name, options)
        for candidate in ("spiece.model", "sentencepiece.model"):
            if (self.model_dir / candidate).is_file():
                self.tokenizer = _SentencePiece(self.model_dir / candidate)
                break
        else:
            if not (self.model_dir / "tokenizer.json").is_file():
                raise FileNotFoundError(f"{self.model_dir} has neither spiece.model nor tokenizer.json")
            self.tokenizer = _HFTokenizerJson(self.model_dir / "tokenizer.json")
        vocabulary = set(read_ct2_vocabulary(self.model_dir))
        self.languages = frozenset(code for code, token in MADLAD_TOKENS.items() if token in vocabulary)
        self._special = CONTROL | set(MADLAD_TOKENS.values())
        self._open(device, compute_type, threads)

    def source_tokens(self, text: str, tgt: str) -> list[str]:
        return [MADLAD_TOKENS[tgt], *self.tokenizer.encode(text), EOS]

    def _decode(self, segments: Sequence[Request]) -> list[tuple[list[str], str]]:
        sources = [self.source_tokens(text, tgt) for text, _, tgt in segments]
        hypotheses = self._beam_search(sources)
        # target language first, as NLLB's answers
        return [self._with_text([MADLAD_TOKENS[tgt], *tokens]) for (_, _, tgt), tokens in zip(segments, hypotheses)]

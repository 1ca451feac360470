"""MADLAD-400 translation (Google, Apache-2.0: commercial use allowed) through CTranslate2.

A T5 model: the target language is a token written before the source text (``<2zu> Good morning``), and the
source language is not given at all. The API's NLLB codes are mapped to MADLAD's language tokens
(:data:`MADLAD_TOKENS`); a language whose token the model's vocabulary lacks is refused like an NLLB model's.
Sentence splitting, batching and re-joining are every translator's (``engines/translation/translator.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.translation.ct2 import CTranslate2Model
from engines.translation.translator import Request

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


class MadladTranslator(CTranslate2Model):
    family = "MADLAD-400"
    tokenizer_files = ("spiece.model", "sentencepiece.model")

    def languages_in(self, vocabulary: list[str]) -> frozenset[str]:
        present = set(vocabulary)
        return frozenset(code for code, token in MADLAD_TOKENS.items() if token in present)

    def special_tokens(self) -> frozenset[str]:
        return CONTROL | frozenset(MADLAD_TOKENS.values())

    def source_tokens(self, text: str, tgt: str) -> list[str]:
        return [MADLAD_TOKENS[tgt], *self.tokenizer.encode(text), EOS]

    def _decode(self, segments: Sequence[Request]) -> list[tuple[list[str], str]]:
        sources = [self.source_tokens(text, tgt) for text, _, tgt in segments]
        hypotheses = self._beam_search(sources)
        # target language first, as NLLB's answers
        return [self._with_text([MADLAD_TOKENS[tgt], *tokens]) for (_, _, tgt), tokens in zip(segments, hypotheses)]

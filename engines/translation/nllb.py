"""NLLB-200 translation: through CTranslate2 (:class:`NLLBTranslator`, the default) or transformers
(:class:`TransformersTranslator`, for checkpoints CTranslate2 cannot convert).

NLLB conventions, shared by both backends:
- source tokens: ``[src_lang] + sentencepiece pieces + ["</s>"]`` (the non-legacy NLLB tokenizer layout);
- the target language is forced as the first decoded token (CTranslate2 ``target_prefix``, transformers
  ``forced_bos_token_id``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import cast

from engines.translation.ct2 import CTranslate2Model
from engines.translation.translator import Request, SegmentingTranslator

LANG_TOKEN = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")  # NLLB language tokens, e.g. zul_Latn
CONTROL_TOKENS = frozenset({"<s>", "</s>", "<pad>", "<unk>", "<mask>"})
EOS = "</s>"
FAMILY = "NLLB-200"


class NLLBTranslator(CTranslate2Model):
    family = FAMILY
    tokenizer_files = ("sentencepiece.bpe.model",)

    def languages_in(self, vocabulary: list[str]) -> frozenset[str]:
        return frozenset(t for t in vocabulary if LANG_TOKEN.match(t))

    def special_tokens(self) -> frozenset[str]:
        return self.languages | CONTROL_TOKENS

    def source_tokens(self, text: str, src: str) -> list[str]:
        return [src, *self.tokenizer.encode(text), EOS]

    def _decode(self, segments: Sequence[Request]) -> list[tuple[list[str], str]]:
        sources = [self.source_tokens(text, src) for text, src, _ in segments]
        prefixes = [[tgt] for _, _, tgt in segments]
        return [self._with_text(tokens) for tokens in self._beam_search(sources, prefixes)]


class TransformersTranslator(SegmentingTranslator):
    """``AutoModelForSeq2SeqLM`` for checkpoints CTranslate2 cannot convert (needs the `transformers` extra)."""

    backend = "transformers"
    family = FAMILY

    def _load(self, device: str, compute_type: str, threads: int) -> None:
        """``compute_type`` is CTranslate2's: here float16 on CUDA, float32 on a CPU."""
        import torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

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

"""What every translator is: the :class:`Translator` protocol the Translation deployment calls, its results, and
:class:`SegmentingTranslator`, the base of the model families here (it splits texts into sentences, decodes all
segments of a batch in ONE model call, :meth:`SegmentingTranslator._decode`, and joins each text back).

:meth:`Translator.translate_batch` returns, per text, the decoded tokens of every segment (target language token
first) so callers and tests can see exactly what the model produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from contracts.errors import InvalidInput
from engines.translation.sentences import join_pieces, split_sentences


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int = 2
    max_length: int = 256  # generated tokens per segment
    max_batch_size: int = 32  # segments per model call chunk (sorted by length to limit padding)
    max_segment_words: int = 80  # longer sentences are split at clauses, then into word chunks


DEFAULT_OPTIONS = DecodeOptions()


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
    languages: frozenset[str]  # the NLLB codes (zul_Latn) the model has a language token for
    options: DecodeOptions

    def unsupported(self, *codes: str) -> InvalidInput | None: ...

    def check_languages(self, *codes: str) -> None: ...

    def translate_batch(self, requests: Sequence[Request]) -> list[TranslationOutput]: ...


class SegmentingTranslator:
    """Splits texts, decodes all segments in one call (:meth:`_decode`), joins them back. A family loads its model
    in :meth:`_load`: every translator is made with the same arguments."""

    name: str
    backend: str
    device: str
    compute_type: str
    languages: frozenset[str]
    options: DecodeOptions

    def __init__(
        self,
        model_dir: Path | str,
        name: str | None = None,
        options: DecodeOptions = DEFAULT_OPTIONS,
        device: str = "auto",
        compute_type: str = "auto",
        threads: int = 0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.name = name or self.model_dir.name
        self.options = options
        self._load(device, compute_type, threads)

    def _load(self, device: str, compute_type: str, threads: int) -> None:
        """Load the model and its tokenizer onto ``device``; set :attr:`languages`, :attr:`device` and
        :attr:`compute_type`."""
        raise NotImplementedError

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

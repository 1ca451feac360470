"""CTC decoding and alignment, shared by every CTC runtime (numpy only).

A CTC model gives, per audio frame (20 ms for wav2vec2, MMS and Omnilingual), a log-probability for every token
of its vocabulary, one of which is the *blank*. The greedy path takes the likeliest token of each frame, merges
repeats and drops blanks (:func:`greedy_path`); each emitted token keeps the frames it was emitted on, so the path
*is* the alignment: a word starts at its first token's first frame and ends after its last token's last frame.

Confidence: a token's probability is its mean posterior over its frames; a word's is the mean of its tokens'
(as faster-whisper averages a word's token probabilities); a segment's ``avg_logprob`` is the mean log-probability
of its tokens (as Whisper's), so ``exp(avg_logprob)`` is the geometric mean of its token probabilities.

Times: the runtimes decode *pieces*, each the speech chunks of the VAD packed end to end with a short gap of
silence between them (:func:`pack`): the gap lets the model end a word where the speech paused, and a word never
spans two chunks (a new chunk starts a new word). :func:`segments_of` maps each word's frames back through the
packing to the original audio (as ``whisper.adapter.restore_times`` does for Whisper) and makes one segment per
chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engines.speech.recognition import SpeechSegment, WordTiming

SAMPLE_RATE = 16_000
GAP_SAMPLES = 3_200  # 0.2 s of silence between packed chunks: a pause the model hears, ten frames
MIN_PIECE_SAMPLES = 8_000  # a piece shorter than 0.5 s is padded with silence (the conv front end needs context)
WORD_PREFIX = "▁"  # SentencePiece's word start, in subword vocabularies


@dataclass(frozen=True)
class Vocabulary:
    """A CTC head's tokens: ``tokens[i]`` is the text of id ``i``; ``blank`` the CTC blank; ``delimiters`` the ids
    that separate words (``|`` in wav2vec2 vocabularies, the space in Omnilingual's); ``silent`` the ids that are
    never text (``<s>``, ``</s>``, ``<pad>``, ``<unk>``)."""

    tokens: tuple[str, ...]
    blank: int
    delimiters: frozenset[int]
    silent: frozenset[int]

    @classmethod
    def of(
        cls, tokens: list[str] | tuple[str, ...], blank: int, delimiters: tuple[str, ...] = ("|", " ")
    ) -> Vocabulary:
        silent = frozenset(i for i, t in enumerate(tokens) if i != blank and t.startswith("<") and t.endswith(">"))
        return cls(
            tuple(tokens),
            blank,
            frozenset(i for i, t in enumerate(tokens) if t in delimiters),
            silent,
        )

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Emission:
    """One token of the greedy path: its id, its frames ``[start, end)`` and its mean posterior over them."""

    token: int
    start: int
    end: int
    probability: float


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities of ``(frames, vocabulary)`` logits (float32)."""
    logits = np.asarray(logits, dtype=np.float32)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def best_frames(log_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's likeliest token of ``(frames, vocabulary)`` log-probabilities, and its posterior."""
    if log_probs.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    best = log_probs.argmax(axis=-1)
    return best, np.exp(log_probs[np.arange(best.size), best])


def greedy_path(log_probs: np.ndarray, blank: int) -> list[Emission]:
    """The greedy CTC path of ``(frames, vocabulary)`` log-probabilities: repeats merged, blanks dropped."""
    return path_of(*best_frames(log_probs), blank)


def path_of(best: np.ndarray, posterior: np.ndarray, blank: int) -> list[Emission]:
    """The greedy CTC path of each frame's likeliest token and its posterior: repeats merged, blanks dropped."""
    if best.size == 0:
        return []
    change = np.flatnonzero(np.diff(best)) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [best.size]])
    return [
        Emission(int(best[s]), int(s), int(e), float(posterior[s:e].mean()))
        for s, e in zip(starts, ends)
        if best[s] != blank
    ]


def text_of(emissions: list[Emission], vocabulary: Vocabulary) -> str:
    """The transcript of a greedy path (words separated by one space)."""
    return " ".join(w for w, _ in _word_tokens(emissions, vocabulary))


def mean_logprob(emissions: list[Emission], vocabulary: Vocabulary) -> float:
    """Mean log-probability of the path's text tokens (-inf when there are none)."""
    probs = [e.probability for e in emissions if e.token not in vocabulary.delimiters | vocabulary.silent]
    return float(np.mean(np.log(np.maximum(probs, 1e-12)))) if probs else float("-inf")


def _word_tokens(emissions: list[Emission], vocabulary: Vocabulary) -> list[tuple[str, list[Emission]]]:
    """Words of the path, each with its text tokens."""
    words: list[tuple[str, list[Emission]]] = []
    text = ""
    parts: list[Emission] = []

    def close() -> None:
        nonlocal text, parts
        if text:
            words.append((text, parts))
        text, parts = "", []

    for emission in emissions:
        if emission.token in vocabulary.delimiters:
            close()
            continue
        if emission.token in vocabulary.silent:
            continue
        piece = vocabulary.tokens[emission.token]
        if piece.startswith(WORD_PREFIX):
            close()
            piece = piece[len(WORD_PREFIX) :]
        if " " in piece:  # a token with a space inside (rare): the space ends the word
            head, _, piece = piece.rpartition(" ")
            text += head
            parts.append(emission)
            close()
        if piece:
            text += piece
            parts.append(emission)
    close()
    return words


# --------------------------------------------------------------------------- packing and times


@dataclass(frozen=True)
class Packed:
    """A piece of audio made of speech chunks: ``audio`` to decode, and where each chunk lies in it (samples) and in
    the original audio."""

    audio: np.ndarray
    at: tuple[int, ...]  # start of each chunk in ``audio``
    chunks: tuple[tuple[int, int], ...]  # (start, end) of each chunk in the original audio

    def chunk_of(self, sample: int) -> int:
        """The chunk that holds ``sample`` of the piece (the nearest one for a sample in a gap)."""
        best, distance = 0, math.inf
        for index, (at, (start, end)) in enumerate(zip(self.at, self.chunks)):
            length = end - start
            if at <= sample < at + length:
                return index
            gap = at - sample if sample < at else sample - (at + length) + 1
            if gap < distance:
                best, distance = index, gap
        return best

    def original(self, sample: int, chunk: int) -> int:
        """The original sample of the piece's ``sample``, clamped into ``chunk``."""
        start, end = self.chunks[chunk]
        return min(end, max(start, start + sample - self.at[chunk]))


def pack(audio: np.ndarray, chunks: list[tuple[int, int]]) -> Packed:
    """The ``chunks`` of ``audio`` end to end, :data:`GAP_SAMPLES` of silence between them, padded to at least
    :data:`MIN_PIECE_SAMPLES`."""
    parts: list[np.ndarray] = []
    at: list[int] = []
    position = 0
    for index, (start, end) in enumerate(chunks):
        if index:
            parts.append(np.zeros(GAP_SAMPLES, np.float32))
            position += GAP_SAMPLES
        at.append(position)
        parts.append(np.asarray(audio[start:end], dtype=np.float32))
        position += end - start
    if position < MIN_PIECE_SAMPLES:
        parts.append(np.zeros(MIN_PIECE_SAMPLES - position, np.float32))
    return Packed(np.ascontiguousarray(np.concatenate(parts)), tuple(at), tuple(chunks))


def frame_samples(samples: int, frames: int) -> int:
    """Samples per output frame of a model that turned ``samples`` into ``frames``: a multiple of 10 ms (160
    samples): 320 for wav2vec2, MMS and Omnilingual (its convolutions trim the last frames of a short input, so the
    plain ratio is a little above), 640 where an adapter halves the frames again (w2v-BERT 2.0)."""
    if frames <= 0:
        return 320
    return max(160, 160 * round(samples / frames / 160))


def segments_of(
    emissions: list[Emission], vocabulary: Vocabulary, packed: Packed, stride: int, offset: float
) -> list[SpeechSegment]:
    """One segment per chunk of ``packed`` that has words, times in seconds of the original audio from ``offset``.
    ``stride``: samples per frame."""
    by_chunk: dict[int, list[WordTiming]] = {}
    logprobs: dict[int, list[float]] = {}
    for _text, parts in _split_at_chunks(_word_tokens(emissions, vocabulary), packed, stride):
        first, last = parts[0], parts[-1]
        chunk = packed.chunk_of(first.start * stride)
        start = packed.original(first.start * stride, chunk)
        end = packed.original(last.end * stride, chunk)
        word = "".join(vocabulary.tokens[p.token].removeprefix(WORD_PREFIX) for p in parts)
        by_chunk.setdefault(chunk, []).append(
            WordTiming(
                " " + word,
                round(start / SAMPLE_RATE + offset, 3),
                round(max(end, start + 1) / SAMPLE_RATE + offset, 3),
                round(float(np.mean([p.probability for p in parts])), 4),
            )
        )
        logprobs.setdefault(chunk, []).extend(math.log(max(p.probability, 1e-12)) for p in parts)
    segments = []
    for chunk in sorted(by_chunk):
        words = by_chunk[chunk]
        segments.append(
            SpeechSegment(
                words[0].start,
                words[-1].end,
                "".join(w.word for w in words).strip(),
                words,
                float(np.mean(logprobs[chunk])),
                0.0,
            )
        )
    return segments


def _split_at_chunks(
    words: list[tuple[str, list[Emission]]], packed: Packed, stride: int
) -> list[tuple[str, list[Emission]]]:
    """Words cut where their tokens change chunk (a word never spans a pause the VAD found)."""
    out: list[tuple[str, list[Emission]]] = []
    for text, parts in words:
        current: list[Emission] = []
        chunk = None
        for part in parts:
            here = packed.chunk_of(part.start * stride)
            if current and here != chunk:
                out.append(("", current))
                current = []
            chunk = here
            current.append(part)
        if current:
            out.append((text, current))
    return out


def split_long(audio: np.ndarray, chunk: tuple[int, int], longest: int) -> list[tuple[int, int]]:
    """``chunk`` cut into parts of at most ``longest`` samples, each cut at the quietest 20 ms of the second half of
    the part before it (attention cost grows with the square of a piece's length, and the models were trained on
    utterances of up to 30-40 s)."""
    start, end = chunk
    parts: list[tuple[int, int]] = []
    frame = 320
    while end - start > longest:
        lo, hi = start + longest // 2, start + longest
        window = np.asarray(audio[lo:hi], dtype=np.float32)
        usable = window.size // frame * frame
        if usable >= frame:
            energy = (window[:usable].reshape(-1, frame) ** 2).mean(axis=1)
            cut = lo + int(energy.argmin()) * frame + frame // 2
        else:
            cut = hi
        parts.append((start, cut))
        start = cut
    parts.append((start, end))
    return parts


def pieces(audio: np.ndarray, chunks: list[dict[str, int]], longest: int) -> list[Packed]:
    """The VAD ``chunks`` of ``audio`` (samples), long ones split (:func:`split_long`), packed into pieces of at most
    ``longest`` samples, gaps included."""
    spans: list[tuple[int, int]] = []
    for chunk in chunks:
        start, end = max(0, int(chunk["start"])), min(audio.size, int(chunk["end"]))
        if end > start:
            spans += split_long(audio, (start, end), longest)
    out: list[Packed] = []
    group: list[tuple[int, int]] = []
    size = 0
    for span in spans:
        length = span[1] - span[0]
        if group and size + GAP_SAMPLES + length > longest:
            out.append(pack(audio, group))
            group, size = [], 0
        size += (GAP_SAMPLES if group else 0) + length
        group.append(span)
    if group:
        out.append(pack(audio, group))
    return out

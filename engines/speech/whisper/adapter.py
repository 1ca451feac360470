"""faster-whisper beyond its documented API, in one place.

Used directly elsewhere, the documented API: ``WhisperModel(...)``, ``WhisperModel.transcribe``,
``WhisperModel.detect_language``. Used here: ``BatchedInferencePipeline.transcribe`` (public; asked only for its
options). faster-whisper's VAD (Silero, its public ``faster_whisper.vad`` API) is every family's:
``engines.speech.vad``.

Internals, and why the documented API does not serve:

- ``faster_whisper.vad.collect_chunks`` and ``faster_whisper.transcribe.restore_speech_timestamps``: pack speech
  chunks end to end (:func:`pack_speech`, :func:`pack_windows`) and map times in the packed speech back to the
  audio (:func:`restore_times`). ``transcribe(vad_filter=True)`` does both, but around a VAD pass of its own; the
  service runs the VAD once (windows of long audio, a stream's commit, diarisation) and decodes those chunks.
- ``BatchedInferencePipeline.forward`` and its ``last_speech_timestamp``, ``faster_whisper.tokenizer.Tokenizer``,
  ``faster_whisper.audio.pad_or_trim``, ``WhisperModel.feature_extractor``, the ``Segment`` / ``Word`` dataclasses
  and ``TranscriptionInfo.transcription_options`` (:class:`BatchedDecoder`, :func:`window_features`,
  :func:`segments_of_windows`): cross-request batching (``engines.speech.whisper.batching``) decodes in one batch the
  windows of concurrent requests. ``BatchedInferencePipeline.transcribe`` batches the windows of one audio only,
  so the step below it is needed: features of given windows in, segments out. Its options are faster-whisper's
  own (suppressed tokens, punctuation, this version's defaults), asked of ``transcribe`` on 1 s of silence that it
  never decodes (its segments are a lazy generator), not copied here.
- ``WhisperModel.model`` (the ``ctranslate2.models.Whisper``), ``.hf_tokenizer``, ``.feature_extractor`` and
  ``.encode`` (:func:`decode_unpadded`): a live stream's partial is encoded at its own length and decoded with a
  bounded number of tokens; ``transcribe`` always pads to 30 s, ten times the encoder's cost for 3 s of speech
  (docs/performance.md). ``WhisperModel.model.detect_language`` on that encoding (:func:`languages_of`): a live
  segment's language is checked on the encoding its decode made (``WhisperModel.detect_language`` encodes 30 s
  again). ``WhisperModel.model.is_multilingual`` (:func:`is_multilingual`): whether language detection can run.
- ``WhisperModel.encode``, ``.get_prompt``, ``.generate_with_fallback``, ``.add_word_timestamps`` and
  ``.max_length`` (:class:`ShortWindowDecoder`): a live stream's committed segment is decoded exactly (beam
  search, word times) in a window of its speech and 5 s of silence instead of 30 s, after the segment committed
  before it as a prefix; ``transcribe`` pads every window to 30 s and cannot say which words were known already.

``tests/unit/test_whisper_adapter.py`` pins the signatures and behaviour of each internal: an upgrade of
faster-whisper that changes one fails there, naming it, before it fails a transcription.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SAMPLE_RATE = 16_000
Chunk = dict[str, int]  # {"start": sample, "end": sample}


# --------------------------------------------------------------------------- packed speech and its times


def pack_speech(audio: np.ndarray, chunks: list[Chunk]) -> np.ndarray:
    """The speech ``chunks`` of ``audio`` end to end (contiguous float32)."""
    from faster_whisper.vad import collect_chunks

    pieces, _ = collect_chunks(audio, chunks, sampling_rate=SAMPLE_RATE)
    return np.ascontiguousarray(np.concatenate(pieces) if len(pieces) > 1 else pieces[0], dtype=np.float32)


def pack_windows(
    audio: np.ndarray, chunks: list[Chunk], max_seconds: float
) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    """The speech ``chunks`` packed into windows of at most ``max_seconds`` (no chunk may be longer), with the
    metadata the batched decoder takes for each: ``offset`` and ``duration`` in the packed speech, seconds (what
    ``forward`` reads; the ``segments`` it also carries miss a window's first chunk after the first window)."""
    from faster_whisper.vad import collect_chunks

    pieces, metadata = collect_chunks(audio, chunks, sampling_rate=SAMPLE_RATE, max_duration=max_seconds)
    return list(pieces), list(metadata)


def restore_times(segments: Iterable[Any], chunks: list[Chunk]) -> Iterator[Any]:
    """faster-whisper segments timed in the packed speech of ``chunks``, retimed (in place, lazily) in the audio:
    word times each within their chunk, a segment from its first word to its last."""
    from faster_whisper.transcribe import restore_speech_timestamps

    return iter(restore_speech_timestamps(segments, chunks, SAMPLE_RATE))


# --------------------------------------------------------------------------- cross-request batched decoding


def window_features(model: Any, pieces: list[np.ndarray]) -> list[np.ndarray]:
    """Log-mel features of each window of speech, padded to Whisper's 30 s (3000 frames), as the batched
    pipeline computes them (its last frame dropped)."""
    from faster_whisper.audio import pad_or_trim

    return [pad_or_trim(model.feature_extractor(piece)[..., :-1]) for piece in pieces]


class BatchedDecoder:
    """faster-whisper's batched decoder for one model and language: windows' features in, segments (dicts) per
    window out, timed in the packed speech. Not thread-safe: one decode at a time (the batcher's thread)."""

    def __init__(self, model: Any, language: str, beam_size: int) -> None:
        from faster_whisper import BatchedInferencePipeline
        from faster_whisper.tokenizer import Tokenizer

        self._pipeline = BatchedInferencePipeline(model)
        _, info = self._pipeline.transcribe(
            np.zeros(SAMPLE_RATE, dtype=np.float32),
            language=language,
            beam_size=beam_size,
            temperature=0.0,
            word_timestamps=True,
            without_timestamps=False,
            vad_filter=False,
            clip_timestamps=[{"start": 0.0, "end": 1.0}],
        )
        self.options = info.transcription_options
        self._tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language
        )

    def decode(self, features: np.ndarray, metadata: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        # windows of different files: no pause carried from one batch to the next (word timing uses it)
        self._pipeline.last_speech_timestamp = 0.0
        return list(self._pipeline.forward(features, self._tokenizer, metadata, self.options))


def segments_of_windows(decoded: list[list[dict[str, Any]]]) -> list[Any]:
    """faster-whisper ``Segment`` objects (greedy temperature 0) of the batched decoder's segments per window."""
    from faster_whisper.transcribe import Segment, Word

    return [
        Segment(
            id=index,
            seek=part["seek"],
            start=round(part["start"], 3),
            end=round(part["end"], 3),
            text=part["text"],
            tokens=part["tokens"],
            avg_logprob=part["avg_logprob"],
            compression_ratio=part["compression_ratio"],
            no_speech_prob=part["no_speech_prob"],
            words=[Word(**word) for word in part.get("words") or []],
            temperature=0.0,
        )
        for index, part in enumerate((p for window in decoded for p in window), start=1)
    ]


# --------------------------------------------------------------------------- the model underneath


def is_multilingual(model: Any) -> bool:
    """Whether a loaded ``WhisperModel`` knows languages (and detects them)."""
    return bool(model.model.is_multilingual)


Languages = list[tuple[str, float]]  # Whisper's language tokens ("en", "sw") with their probability, best first


def languages_of(model: Any, encoded: Any) -> Languages:
    """Whisper's language detection on speech encoded already (``WhisperModel.encode`` output of any length): one
    decoder step, so a decode and its language check share the encoder's cost."""
    found = model.model.detect_language(encoded)[0]
    return [(token[2:-2], float(p)) for token, p in found]


@dataclass
class QuickDecode:
    """What :func:`decode_unpadded` made of some speech: its text ("" when nothing was decoded), the mean
    log-probability per token (the end token counted, as faster-whisper does), the no-speech probability, and
    the languages Whisper hears in it (empty unless asked for)."""

    text: str
    avg_logprob: float
    no_speech_prob: float
    languages: Languages


def decode_unpadded(
    model: Any,
    speech: np.ndarray,
    language: str | Callable[[Languages], str],
    max_tokens: int,
    *,
    detect: bool = False,
) -> QuickDecode:
    """Greedy decode of ``speech`` encoded at its own length (not padded to 30 s), without timestamps, at most
    ``max_tokens`` tokens and no repeated 3-gram (Whisper may loop on a short window). ``detect``: Whisper's
    language detection on the same encoding too (:func:`languages_of`). ``language``: a Whisper token, or a
    choice of one from that detection (then always made): one encoding says the language and is decoded in it."""
    features = model.feature_extractor(np.ascontiguousarray(speech, dtype=np.float32))
    features = features[:, : max(2, features.shape[-1] // 2 * 2)]  # the encoder halves the frames
    return _greedy(model, model.encode(features), language, max_tokens, detect)


def _greedy(
    model: Any, encoded: Any, language: str | Callable[[Languages], str], max_tokens: int, detect: bool
) -> QuickDecode:
    heard = languages_of(model, encoded) if detect or callable(language) else []
    if callable(language):
        language = language(heard)
    tokenizer = model.hf_tokenizer
    prompt = [
        tokenizer.token_to_id(t)
        for t in ("<|startoftranscript|>", f"<|{language}|>", "<|transcribe|>", "<|notimestamps|>")
    ]
    result = model.model.generate(
        encoded,
        [prompt],
        beam_size=1,
        max_length=max_tokens,
        no_repeat_ngram_size=3,
        return_scores=True,
        return_no_speech_prob=True,
        suppress_blank=True,
    )[0]
    ids = [t for t in result.sequences_ids[0] if t < tokenizer.token_to_id("<|endoftext|>")]
    text = str(tokenizer.decode(ids)).strip()
    if not text:
        return QuickDecode("", float("-inf"), float(result.no_speech_prob), heard)
    cum_logprob = float(result.scores[0]) * len(ids)  # scores are normalised by length
    return QuickDecode(text, cum_logprob / (len(ids) + 1), float(result.no_speech_prob), heard)


SHORT_WINDOW_SILENCE_FRAMES = 500  # 5 s of silence after the speech of a short window (see ShortWindowDecoder)


def encode_short_window(model: Any, speech: np.ndarray) -> tuple[Any, int]:
    """The encoding of up to 30 s of ``speech`` and :data:`SHORT_WINDOW_SILENCE_FRAMES` of silence after it (see
    :class:`ShortWindowDecoder`), and the number of its feature frames that hold the speech."""
    features = model.feature_extractor(np.ascontiguousarray(speech, dtype=np.float32))
    frames = max(2, min(features.shape[-1] - 1, 3000) // 2 * 2)  # content frames; the encoder halves them
    window = np.zeros((features.shape[0], min(3000, frames + SHORT_WINDOW_SILENCE_FRAMES)), features.dtype)
    window[:, :frames] = features[:, :frames]
    return model.encode(window), frames


def short_window_languages(model: Any, speech: np.ndarray) -> Languages:
    """Whisper's language detection on up to 30 s of ``speech`` in a short window (:func:`encode_short_window`),
    not padded to 30 s: the language check of a live segment whose decode could not share its encoding."""
    return languages_of(model, encode_short_window(model, speech)[0])


class ShortWindowDecoder:
    """faster-whisper's exact decode (beam search, word times, its options) of up to 30 s of speech in a window
    cut short: the speech's features and :data:`SHORT_WINDOW_SILENCE_FRAMES` of silence (what ``pad_or_trim``
    pads with), not padded to 30 s, so a live stream's committed segment of a few seconds costs a fraction of the
    encoder. Whisper needs that silence: on the speech alone it rarely ends its text (the same sentence two or
    three times on most short clips); with 5 s its word error is the full window's or lower
    (docs/speech.md#streaming-latency). One
    window, one segment, no timestamp tokens (they would drive faster-whisper's seek across windows): the word
    times come from the cross-attention alignment, as ``transcribe`` times words. Through
    ``WhisperModel.encode``, ``get_prompt``, ``generate_with_fallback``, ``add_word_timestamps`` (``transcribe``'s
    steps for one window) and ``max_length``, with its options, asked of ``transcribe`` as :class:`BatchedDecoder`
    asks them. Thread-safe (nothing is kept between calls)."""

    def __init__(self, model: Any, language: str, beam_size: int, temperatures: Sequence[float]) -> None:
        from faster_whisper.tokenizer import Tokenizer

        _, info = model.transcribe(
            np.zeros(SAMPLE_RATE, dtype=np.float32),
            language=language,
            beam_size=beam_size,
            temperature=list(temperatures),
            word_timestamps=True,
            without_timestamps=True,
            vad_filter=False,
            condition_on_previous_text=False,
        )
        self.model = model
        self.options = info.transcription_options
        self.tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language
        )

    def decode(
        self, speech: np.ndarray, prefix: str = "", prefix_seconds: float = 0.0, max_tokens: int | None = None
    ) -> list[Any]:
        """The faster-whisper ``Segment`` of ``speech`` (at most 30 s; none when Whisper hears no speech or
        decodes no new text), timed in it. ``prefix``: the text of the first ``prefix_seconds`` of ``speech``,
        known already: Whisper is made to start with it (its prefix) and only what follows is returned, aligned
        after it. ``max_tokens``: at most this many new tokens."""
        return self.decode_heard(speech, prefix, prefix_seconds, max_tokens)[0]

    def decode_heard(
        self,
        speech: np.ndarray,
        prefix: str = "",
        prefix_seconds: float = 0.0,
        max_tokens: int | None = None,
        *,
        detect: bool = False,
    ) -> tuple[list[Any], Languages]:
        """:meth:`decode`, and with ``detect`` the languages Whisper hears in the whole window (prefix included),
        from the same encoding (:func:`languages_of`)."""
        import dataclasses

        from faster_whisper.transcribe import Segment, Word

        model, tokenizer = self.model, self.tokenizer
        encoded, frames = encode_short_window(model, speech)
        heard = languages_of(model, encoded) if detect else []
        prefix = prefix.strip()
        tokens_in = model.get_prompt(tokenizer, [], without_timestamps=True, prefix=prefix or None)
        room = model.max_length - len(tokens_in)  # faster-whisper refuses a prompt and new tokens beyond it
        options = dataclasses.replace(self.options, max_new_tokens=min(max_tokens or room, room))
        result, avg_logprob, temperature, compression_ratio = model.generate_with_fallback(
            encoded, tokens_in, tokenizer, options
        )
        silent = options.no_speech_threshold is not None and result.no_speech_prob > options.no_speech_threshold
        if silent and not (options.log_prob_threshold is not None and avg_logprob > options.log_prob_threshold):
            return [], heard
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        known = tokenizer.encode(" " + prefix) if prefix else []
        if tokens[: len(known)] == known:  # CTranslate2 returns the prefix with what follows it
            tokens = tokens[len(known) :]
        text = tokenizer.decode(tokens)
        if not text.strip():
            return [], heard
        duration = frames * model.feature_extractor.time_per_frame
        parts: list[dict[str, Any]] = []
        if known:  # aligned with the rest, so the new words are timed after it
            parts.append({"seek": 0, "start": 0.0, "end": prefix_seconds, "tokens": known})
        parts.append({"seek": 0, "start": prefix_seconds if known else 0.0, "end": duration, "tokens": tokens})
        model.add_word_timestamps(
            [parts],
            tokenizer,
            encoded,
            frames,
            options.prepend_punctuations,
            options.append_punctuations,
            last_speech_timestamp=0.0,
        )
        part = parts[-1]
        segment = [
            Segment(
                id=1,
                seek=0,
                start=round(part["start"], 3),
                end=round(part["end"], 3),
                text=text,
                tokens=tokens,
                avg_logprob=avg_logprob,
                compression_ratio=compression_ratio,
                no_speech_prob=result.no_speech_prob,
                words=[Word(**word) for word in part.get("words") or []],
                temperature=temperature,
            )
        ]
        return segment, heard

"""Whisper (faster-whisper, CTranslate2, int8 on CPU), one speech-model family: its default model and
per-language models (``engines.speech.whisper.models``), the languages they serve
(``engines.speech.whisper.languages``), Whisper's language detector (``engines.speech.whisper.detector``), and
:class:`WhisperRecognizer`, the family's :class:`~engines.speech.recognition.Recognizer`.

A request for a code without a model is an :class:`UnsupportedLanguage` that names the setting to configure; a
file's speech (its VAD chunks, ``engines.speech.vad``) is decoded by :meth:`WhisperRecognizer.transcribe`, packed
into 30 s windows, times mapped back to the original audio. A decoder conditioned on the language, Whisper writes
fluent text in the language it is told: a fluent, confident decode is evidence of the language
(``fluent_means_language``). Its segments are screened by its hallucination guards (``engines.speech.whisper.guards``).

faster-whisper's documented API is used here (``WhisperModel``, its ``transcribe`` and ``detect_language``);
everything below it goes through :mod:`engines.speech.whisper.adapter`, which says why.

Batching (``batch_size`` > 1): the windows of concurrent calls that share a model and a language are decoded
together (:mod:`engines.speech.whisper.batching`, faster-whisper's batched decoder). Each 30 s window is then
decoded on its own, without Whisper's seek across windows; with the sampling fallback on, decoding stays
sequential (the batched decoder has one temperature).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any, Unpack, cast

import numpy as np

from contracts.errors import TimedOut
from contracts.languages import CODE_SWITCHED_ZULU
from contracts.quality import UNMEASURED, Quality, speech_quality
from engines.speech.recognition import Heard, Route, Served, SpeechSegment, WordTiming
from engines.speech.screening import repeats
from engines.speech.whisper import adapter as fw
from engines.speech.whisper import guards
from engines.speech.whisper.batching import WindowBatcher
from engines.speech.whisper.detector import QUICK_MAX_SECONDS, QUICK_TOKENS_PER_SECOND, WhisperDetector
from engines.speech.whisper.languages import DEFAULT_MODEL, route_in, routes_of
from engines.speech.whisper.models import Loading, WhisperModels

SAMPLE_RATE = 16_000
WINDOW_SECONDS = 30.0  # what one Whisper window holds
EXACT_UNPADDED_MAX_SECONDS = 28.0  # a stream's committed speech up to this long is encoded unpadded
EXACT_TOKENS_PER_SECOND = 10.0  # a committed segment's decode stops after this many tokens per second of speech


class WhisperRecognizer(WhisperModels):
    """Whisper's models by language, as the pipeline's recognizer. A live stream's steps (:meth:`quick_segments`,
    :meth:`exact_segments`) decode on the live instance (``WhisperModels.live_model``); a committed segment too
    long for a short window (over :data:`EXACT_UNPADDED_MAX_SECONDS`) is decoded as files are, on the files'
    instance."""

    family = "whisper"
    fluent_means_language = True  # the decoder is conditioned on the language it is told
    partial_is_exact = False  # a partial is greedy and unpadded; a committed segment beam-searched in a short window
    detects_language = True  # a live decode's own encoding can say the language

    def __init__(
        self,
        default_model: str | Path,
        language_models: dict[str, str] | None = None,
        *,
        beam_size: int = 5,
        temperature_fallback: bool = False,
        seed: int = 1234,
        batch_size: int = 1,  # windows decoded together across concurrent calls (1: each call alone)
        batch_wait_s: float = 0.01,  # how long a batch waits to fill
        offline_base: bool = False,  # the default model is the offline Whisper base (measured here, MIT)
        **loading: Unpack[Loading],
    ) -> None:
        super().__init__(default_model, language_models, **loading)
        self.beam_size = beam_size
        # The fallback samples; off by default so the same audio always gives the same transcript.
        self.temperatures = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if temperature_fallback else (0.0,)
        self.seed = seed
        self.offline_base = offline_base
        self.batch_size = batch_size
        self._batcher = (
            WindowBatcher(self._decode_batch, batch_size, batch_wait_s)
            if batch_size > 1 and len(self.temperatures) == 1
            else None
        )
        self._batched: dict[Hashable, fw.BatchedDecoder] = {}  # by (model key, language)
        self._short_windows: dict[Hashable, fw.ShortWindowDecoder] = {}  # by (model key, language)
        self.detector = WhisperDetector(self, self.routes)

    @property
    def batching(self) -> bool:
        """Whether concurrent calls' windows share batches (``batch_size`` > 1 and no sampling fallback)."""
        return self._batcher is not None

    # ------------------------------------------------------------------ languages

    def routes(self) -> dict[str, Route]:
        """Every language code that has a model, with how it is transcribed."""
        return routes_of(self.default_ref, self.language_models, self)

    def route(self, requested: str) -> Route:
        """The route for a requested language code (any accepted spelling), or :class:`UnsupportedLanguage`
        naming Whisper's setting (``whisper.languages.route_in``)."""
        return route_in(self.routes(), requested)

    def served(self, route: Route) -> Served:
        """The default model's name, or a configured model's reference; Whisper base's measured quality."""
        quality = self._quality(route)
        note = None
        if route.code == CODE_SWITCHED_ZULU and route.model_key != CODE_SWITCHED_ZULU:
            note = "Runs on the isiZulu model."
        elif route.language_token is None:
            note = "Auto-detection reaches it only through the text language identifier."
        if quality.poor:
            note = f"Poor on real speech: {quality.note}"
        default = route.model_key == DEFAULT_MODEL
        licence = "MIT (OpenAI Whisper)" if default and self.offline_base else None
        return Served(self.default_name if default else route.model_ref, note, quality, licence)

    def _quality(self, route: Route) -> Quality:
        """Measured here for the offline Whisper base; else unmeasured, said plainly."""
        on_base = route.model_key == DEFAULT_MODEL and self.offline_base
        return speech_quality(route.code) if on_base else UNMEASURED

    def backend(self) -> str:
        return f"faster-whisper (CTranslate2 {self.compute_type}, {self.device})"

    def warm_up(self) -> None:
        """Load the default model and its live steps' instance."""
        self.model(DEFAULT_MODEL)
        self.live_model(DEFAULT_MODEL)

    # ------------------------------------------------------------------ guards

    def screen(self, segments: list[SpeechSegment]) -> tuple[list[SpeechSegment], list[str]]:
        """The hallucination guards (``whisper.guards.screen``), a passage said twice cut to once first."""
        return guards.screen([guards.undoubled(s) for s in segments])

    def readable(self, text: str, seconds: float, logprob: float) -> bool:
        """Whether ``text`` is not a decoder loop."""
        return not repeats(text)

    def language_blind(self, route: Route) -> bool:
        return False  # Whisper is told the language, or detects it itself

    # ------------------------------------------------------------------ decoding

    def _shares_detection(self, route: Route) -> bool:
        """Whether a decode for ``route`` runs on the multilingual default model, whose encoding can also say the
        language (a configured model may be a fine-tune whose detector is not to be trusted)."""
        return route.model_key == DEFAULT_MODEL and fw.is_multilingual(self.model(DEFAULT_MODEL))

    def quick_transcript(self, speech: np.ndarray, route: Route) -> tuple[str, float]:
        """A cheap look at what ``route``'s model makes of up to 30 s of ``speech``: greedy, no timestamps, no word
        times. The text and its mean log-probability per token (-inf when nothing was decoded)."""
        segments = self._greedy(self.model(route.model_key), speech[: 30 * SAMPLE_RATE], route.language_token)
        decoded = [(s.text, s.avg_logprob) for s in segments]
        if not decoded:
            return "", float("-inf")
        return " ".join(t for t, _ in decoded).strip(), float(np.mean([lp for _, lp in decoded]))

    @staticmethod
    def _greedy(model: Any, speech: np.ndarray, language: str | None) -> Iterator[Any]:
        """faster-whisper's greedy decode of ``speech`` (padded to its 30 s windows), without timestamps."""
        segments, _ = model.transcribe(
            np.ascontiguousarray(speech),
            language=language,
            beam_size=1,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
        )
        return cast(Iterator[Any], segments)

    def quick_segments(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[dict[str, int]],
        *,
        offset: float = 0.0,
        detect: bool = False,
    ) -> Heard:
        """A live stream's partial of the speech ``chunks`` of ``audio``: greedy, without timestamps or word times,
        one segment, times in seconds from ``offset``. Cheaper than :meth:`exact_segments` (beam search, word
        alignment, 5 s of silence after the speech), which a committed segment gets: up to
        :data:`QUICK_MAX_SECONDS` of packed speech is encoded at its own length, not padded to 30 s (the encoder
        is most of a step's cost and scales with its input: docs/performance.md). Whisper was trained on 30 s
        windows and may loop on a short one, so the decode is bounded (about :data:`QUICK_TOKENS_PER_SECOND`),
        repeats no 3-gram, and the hallucination guards still screen it; longer speech (a model without a language
        token too) is padded as usual. ``detect``: the languages Whisper hears in that speech too
        (``Heard.detection``), from the same encoding where it can."""
        if not chunks:
            return Heard([])
        model = self.live_model(route.model_key)
        speech = fw.pack_speech(audio, chunks)
        seconds = speech.size / SAMPLE_RATE
        if route.language_token is None or seconds > QUICK_MAX_SECONDS:
            segments = self._greedy(model, speech, route.language_token)
            found = list(fw.restore_times(segments, chunks))
            return Heard(
                [
                    SpeechSegment(
                        round(float(s.start) + offset, 3),
                        round(float(s.end) + offset, 3),
                        s.text.strip(),
                        [],
                        float(s.avg_logprob),
                        float(s.no_speech_prob),
                    )
                    for s in found
                ],
                self.detector.detect_short(speech) if detect else None,
                seconds,
            )
        shared = detect and self._shares_detection(route)
        decoded = fw.decode_unpadded(
            model,
            speech,
            route.language_token,
            max_tokens=int(8 + QUICK_TOKENS_PER_SECOND * seconds),
            detect=shared,
        )
        detection = (
            self.detector.detection_of(decoded.languages)
            if shared
            else self.detector.detect_short(speech)
            if detect
            else None
        )
        if not decoded.text:
            return Heard([], detection, seconds)
        segment = SpeechSegment(
            round(chunks[0]["start"] / SAMPLE_RATE + offset, 3),
            round(chunks[-1]["end"] / SAMPLE_RATE + offset, 3),
            decoded.text,
            [],
            decoded.avg_logprob,
            decoded.no_speech_prob,
        )
        return Heard([segment], detection, seconds)

    # ------------------------------------------------------------------ transcription

    def transcribe(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[dict[str, int]],
        *,
        offset: float = 0.0,
        deadline: float | None = None,
    ) -> Iterator[SpeechSegment]:
        """Segments of the speech ``chunks`` of ``audio`` (samples), times in seconds from ``offset``.

        Only speech is decoded: the chunks are packed end to end and times are mapped back. ``deadline``
        (``time.time()``) raises :class:`TimedOut` between segments once passed.
        """
        if not chunks:
            return
        # a model without a language token for this route (a fine-tuned one) detects its language: alone
        if self._batcher is not None and route.language_token:
            segments: Iterable[Any] = self._transcribe_batched(audio, route, chunks)
        else:
            segments = self._transcribe_alone(audio, route, chunks)
        for segment in segments:
            if deadline is not None and time.time() > deadline:
                raise TimedOut("Transcription took longer than the time limit.")
            yield _speech_segment(segment, offset)

    def exact_segments(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[dict[str, int]],
        *,
        offset: float = 0.0,
        heard: list[dict[str, int]] | None = None,
        heard_text: str = "",
        detect: bool = False,
    ) -> Heard:
        """A live stream's committed speech ``chunks`` of ``audio``, decoded as :meth:`transcribe` decodes (beam
        search, word times), but in a short window (``whisper.adapter.ShortWindowDecoder``): up to
        :data:`EXACT_UNPADDED_MAX_SECONDS` of packed speech and 5 s of silence are encoded instead of 30 s (the
        encoder is most of the cost and scales with its input: docs/speech.md#streaming-latency). ``heard``: the
        speech just before, committed already as ``heard_text``: Whisper hears it first and is made to start with
        its text (a segment cut at a short pause in its sentence, on its own, is often misheard: "the weather
        today" after "Good morning,"); only what follows is returned. Longer speech, or a model without a language
        token, goes through :meth:`transcribe` (without what was heard). ``detect``: the languages Whisper hears in
        the chunks' speech too (``Heard.detection``): from the decode's own encoding when nothing heard before is
        in it, else from the speech alone."""
        if not chunks:
            return Heard([])
        speech = fw.pack_speech(audio, chunks)
        seconds = speech.size / SAMPLE_RATE
        if route.language_token is None or speech.size > EXACT_UNPADDED_MAX_SECONDS * SAMPLE_RATE:
            segments = list(self.transcribe(audio, route, chunks, offset=offset))
            return Heard(segments, self.detector.detect_short(speech) if detect else None, seconds)
        before = heard if heard and heard_text.strip() else []
        known = fw.pack_speech(audio, before) if before else np.zeros(0, np.float32)
        if known.size + speech.size > EXACT_UNPADDED_MAX_SECONDS * SAMPLE_RATE:
            before, known = [], np.zeros(0, np.float32)
        shared = detect and not before and self._shares_detection(route)
        self._seed_sampling()
        decoder = self._short_window(route)
        max_tokens = int(10 + EXACT_TOKENS_PER_SECOND * speech.size / SAMPLE_RATE)
        decoded, languages = decoder.decode_heard(
            np.concatenate([known, speech]) if before else speech,
            heard_text if before else "",
            known.size / SAMPLE_RATE,
            max_tokens=max_tokens,
            detect=shared,
        )
        if _derailed(decoded):
            # in a short window Whisper can lose the speech ("20 20" for "20th century research has shown that ...",
            # a FLEURS clip): the speech alone without what was heard, else in the padded window files get
            retried = decoder.decode_heard(speech, "", 0.0, max_tokens=max_tokens)[0] if before else decoded
            if before and _surety(retried) > _surety(decoded):
                decoded, before = retried, []
            if _derailed(decoded):
                padded = list(self.transcribe(audio, route, chunks, offset=offset))
                if min((s.avg_logprob for s in padded), default=float("-inf")) > _surety(decoded):
                    return Heard(padded, self.detector.detect_short(speech) if detect else None, seconds)
        detection = (
            self.detector.detection_of(languages) if shared else self.detector.detect_short(speech) if detect else None
        )
        segments = [_speech_segment(s, offset) for s in fw.restore_times(decoded, before + chunks)]
        return Heard(segments, detection, seconds)

    def _seed_sampling(self) -> None:
        """Seed CTranslate2's sampling before a decode that may fall back to it: the same audio, the same text."""
        if len(self.temperatures) > 1:
            import ctranslate2

            ctranslate2.set_random_seed(self.seed)

    def _short_window(self, route: Route) -> fw.ShortWindowDecoder:
        key = (route.model_key, route.language_token)
        found = self._short_windows.get(key)
        if found is None:
            model = self.live_model(route.model_key)
            with self._lock:
                found = self._short_windows.get(key)
                if found is None:
                    assert route.language_token is not None
                    found = fw.ShortWindowDecoder(model, route.language_token, self.beam_size, self.temperatures)
                    self._short_windows[key] = found
        return found

    def _transcribe_alone(self, audio: np.ndarray, route: Route, chunks: list[dict[str, int]]) -> Iterator[Any]:
        """faster-whisper's sequential decoder over the packed speech (seeking across 30 s windows)."""
        model = self.model(route.model_key)
        speech = fw.pack_speech(audio, chunks)
        self._seed_sampling()
        segments, _info = model.transcribe(
            speech,
            language=route.language_token,
            task="transcribe",
            beam_size=self.beam_size,
            temperature=list(self.temperatures),
            word_timestamps=True,
            vad_filter=False,
            condition_on_previous_text=False,
        )
        return fw.restore_times(segments, chunks)

    # ------------------------------------------------------------------ batched decoding

    def _transcribe_batched(self, audio: np.ndarray, route: Route, chunks: list[dict[str, int]]) -> Iterator[Any]:
        """The speech packed into windows of at most 30 s, decoded in batches shared with concurrent calls."""
        assert self._batcher is not None
        model = self.model(route.model_key)
        chunks = split_long_chunks(chunks, int(WINDOW_SECONDS * SAMPLE_RATE))
        pieces, metadata = fw.pack_windows(audio, chunks, WINDOW_SECONDS)
        decoded = self._batcher.decode(
            (route.model_key, route.language_token), fw.window_features(model, pieces), metadata
        )
        return fw.restore_times(fw.segments_of_windows(decoded), chunks)

    def _decode_batch(
        self, key: Hashable, features: np.ndarray, metadata: list[dict[str, Any]]
    ) -> list[list[dict[str, Any]]]:
        """One batched decode of windows of one model and language (runs on the batcher's thread)."""
        return self._batched_decoder(key).decode(features, metadata)

    def _batched_decoder(self, key: Hashable) -> fw.BatchedDecoder:
        found = self._batched.get(key)
        if found is None:  # built on the batcher's one thread: no race
            model_key, language = cast(tuple[str, str], key)
            found = self._batched[key] = fw.BatchedDecoder(self.model(model_key), language, self.beam_size)
        return found

    def close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()


def _derailed(decoded: list[Any]) -> bool:
    """Whether an exact decode lost the speech: nothing, a loop, or below Whisper's confidence floor."""
    return not decoded or any(s.avg_logprob < guards.LOGPROB_FLOOR or repeats(s.text) for s in decoded)


def _surety(decoded: list[Any]) -> float:
    """A decode's mean log-probability per token (-inf when it holds nothing)."""
    return min((float(s.avg_logprob) for s in decoded), default=float("-inf"))


def _speech_segment(segment: Any, offset: float) -> SpeechSegment:
    """A faster-whisper ``Segment`` (times in seconds of its audio) as a :class:`SpeechSegment` from ``offset``."""
    words = [
        WordTiming(
            w.word,
            round(float(w.start) + offset, 3),
            round(float(w.end) + offset, 3),
            round(float(w.probability), 4),
        )
        for w in (segment.words or [])
    ]
    return SpeechSegment(
        round(float(segment.start) + offset, 3),
        round(float(segment.end) + offset, 3),
        segment.text.strip(),
        words,
        float(segment.avg_logprob),
        float(segment.no_speech_prob),
    )


def split_long_chunks(chunks: list[dict[str, int]], longest: int) -> list[dict[str, int]]:
    """Speech chunks of at most ``longest`` samples: a longer one is cut into equal parts (a window holds 30 s)."""
    out: list[dict[str, int]] = []
    for chunk in chunks:
        length = chunk["end"] - chunk["start"]
        parts = -(-length // longest)
        if parts <= 1:
            out.append(chunk)
            continue
        step = -(-length // parts)
        starts = range(chunk["start"], chunk["end"], step)
        out += [{"start": start, "end": min(start + step, chunk["end"])} for start in starts]
    return out

"""Speech recognition: faster-whisper (CTranslate2, int8 on CPU) with per-language models and honest languages.

Languages (the spec's codes, ISO 639-3 style):

==========  =====================  ===============================================================
code        language               model
==========  =====================  ===============================================================
``afr``     Afrikaans              Whisper base (token ``af``) unless a model is configured
``eng``     (South African) English  Whisper base (``en``)
``fra``     (African) French       Whisper base (``fr``)
``zul``     isiZulu                only a configured model: Whisper has no isiZulu
``sot``     Sesotho                only a configured model: Whisper has no Sesotho
``cs-zul``  code-switched isiZulu  the ``cs-zul`` model if configured, else the ``zul`` model
==========  =====================  ===============================================================

``KHULUMA_WHISPER_LANGUAGE_MODELS`` (``WhisperSettings.language_models``) maps a code to a faster-whisper model
(CTranslate2 directory, or a Hugging Face id / size name that faster-whisper can load from its cache: nothing is
downloaded here when offline). Any code may be configured (e.g. ``xho``). Models load lazily, once, and are shared
by every thread of the process.

Codes, names, aliases and Whisper tokens come from the language registry (``contracts.languages``). A request
for a code without a model is an :class:`UnsupportedLanguage` that names the setting to configure.

Auto-detection (:meth:`WhisperRecognizer.detect`) runs Whisper's language detection on up to 30 s of speech over
every language Whisper knows, and reports the likeliest served language with the probability mass of all served
ones, never renormalised: audio in a language without a model (isiZulu, isiXhosa, Setswana...) leaves little mass
on the served languages, and :mod:`engines.speech.pipeline` refuses it instead of answering a confident wrong language.
Configured languages without a Whisper token (zul, sot) are recognised by their own model's transcript, checked by
the text language identifier, in :mod:`engines.speech.pipeline`.

Long audio: :meth:`speech_chunks` runs Silero VAD (faster-whisper's bundled ONNX model) and
:meth:`transcribe` decodes only the speech, packed into 30 s windows, mapping times back to the original audio.

faster-whisper's documented API is used here (``WhisperModel``, its ``transcribe`` and ``detect_language``);
everything below it goes through :mod:`engines.speech.whisper.adapter`, which says why.

Batching (``batch_size`` > 1): the windows of concurrent calls that share a model and a language are decoded
together (:mod:`engines.speech.whisper.batching`, faster-whisper's batched decoder). Each 30 s window is then
decoded on its own, without Whisper's seek across windows; with the sampling fallback on, decoding stays
sequential (the batched decoder has one temperature).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np

from contracts import languages
from contracts.errors import TimedOut, Unavailable, UnsupportedLanguage
from contracts.languages import CODE_SWITCHED_ZULU, TRANSCRIPTION_CODES, transcription_code
from engines.speech.recognition import Detection, Heard, Route, SpeechSegment, WordTiming
from engines.speech.whisper import adapter as fw
from engines.speech.whisper.batching import WindowBatcher

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
DEFAULT_MODEL = "default"  # key of the default model in the model table
SETTING = "KHULUMA_WHISPER_LANGUAGE_MODELS"
WINDOW_SECONDS = 30.0  # what one Whisper window holds


QUICK_MAX_SECONDS = (
    8.0  # a partial of up to this much speech is encoded unpadded (WhisperRecognizer.quick_segments); longer, padded
)
EXACT_UNPADDED_MAX_SECONDS = 28.0  # a stream's committed speech up to this long is encoded unpadded
EXACT_TOKENS_PER_SECOND = 10.0  # a committed segment's decode stops after this many tokens per second of speech
QUICK_TOKENS_PER_SECOND = 6.0  # a partial's decode stops after about this many tokens per second of speech


def _registry(code: str) -> languages.Language | None:
    return languages.LANGUAGES.get(code)


def _on_base(code: str) -> bool:
    lang = _registry(code)
    return bool(lang and lang.whisper_base)


def _whisper_token(code: str) -> str | None:
    """Whisper's language token for ``code`` (None: Whisper does not know the language, e.g. isiZulu)."""
    lang = _registry(code)
    return lang.whisper if lang else None


def whisper_language_name(token: str) -> str:
    """English name of a Whisper language token ('sw' -> 'Swahili'): the registry's, else CLDR's (babel)."""
    for lang in languages.LANGUAGES.values():
        if lang.whisper == token:
            return lang.name
    try:
        from babel import Locale

        return str(Locale.parse(token).english_name)
    except Exception:  # noqa: BLE001 - a token CLDR does not know ('haw' is known; 'jw' is not)
        return token


# The transcription languages in the order the service has always listed them (error texts, /api/v1/models):
# those Whisper base covers, then those that need a configured model.
LISTED_CODES: tuple[str, ...] = tuple(c for c in TRANSCRIPTION_CODES if _on_base(c)) + tuple(
    c for c in TRANSCRIPTION_CODES if not _on_base(c)
)


class WhisperRecognizer:
    """Whisper models by language; thread-safe (a model runs ``parallel_decodes`` decodes at once, each on
    ``cpu_threads`` threads, and queues the rest). Where ``live_threads`` is set and differs from ``cpu_threads``,
    a live stream's steps (:meth:`quick_segments`, :meth:`exact_segments`) run on a second instance of the same
    weights, ``live_decodes`` decodes at once of ``live_threads`` threads (:meth:`live_model`): a step's short
    window is mostly small decoder steps, which one thread runs faster than two, while a 30 s file window is
    mostly encoder, which two threads speed up (docs/speech.md#decodes-side-by-side). A committed segment too long
    for a short window (over :data:`EXACT_UNPADDED_MAX_SECONDS`) is decoded as files are, on the files' instance."""

    def __init__(
        self,
        default_model: str | Path,
        language_models: dict[str, str] | None = None,
        *,
        default_model_name: str = "whisper-base",
        device: str = "cpu",
        compute_type: str = "int8",
        cpu_threads: int = 0,
        parallel_decodes: int = 1,  # decodes of one model at once (CTranslate2 workers sharing its weights)
        beam_size: int = 5,
        temperature_fallback: bool = False,
        seed: int = 1234,
        download_root: Path | None = None,  # Hugging Face cache to look in (default: the standard HF cache)
        batch_size: int = 1,  # windows decoded together across concurrent calls (1: each call alone)
        batch_wait_s: float = 0.01,  # how long a batch waits to fill
        live_threads: int = 0,  # threads per live step's decode (0: the files' instance and threads)
        live_decodes: int = 1,  # live steps' decodes at once, on their own instance
    ) -> None:
        self.default_ref = str(default_model)
        self.default_name = default_model_name
        self.language_models = {transcription_code(k): str(v) for k, v in (language_models or {}).items() if v}
        self.device = device
        self.compute_type = compute_type
        self.cpu_threads = cpu_threads or (os.cpu_count() or 1)
        self.parallel_decodes = max(1, parallel_decodes)
        own_live = live_threads > 0 and live_threads != self.cpu_threads
        self.live_threads = live_threads if own_live else self.cpu_threads
        self.live_decodes = max(1, live_decodes) if own_live else self.parallel_decodes
        self.beam_size = beam_size
        # The fallback samples; off by default so the same audio always gives the same transcript.
        self.temperatures = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if temperature_fallback else (0.0,)
        self.seed = seed
        self.download_root = download_root
        self._models: dict[str, Any] = {}
        self._live_models: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.batch_size = batch_size
        self._batcher = (
            WindowBatcher(self._decode_batch, batch_size, batch_wait_s)
            if batch_size > 1 and len(self.temperatures) == 1
            else None
        )
        self._batched: dict[Hashable, fw.BatchedDecoder] = {}  # by (model key, language)
        self._short_windows: dict[Hashable, fw.ShortWindowDecoder] = {}  # by (model key, language)

    @property
    def batching(self) -> bool:
        """Whether concurrent calls' windows share batches (``batch_size`` > 1 and no sampling fallback)."""
        return self._batcher is not None

    # ------------------------------------------------------------------ languages

    def routes(self) -> dict[str, Route]:
        """Every language code that has a model, with how it is transcribed."""
        out: dict[str, Route] = {}
        for code in LISTED_CODES:
            if _on_base(code):
                out[code] = Route(code, DEFAULT_MODEL, self.default_ref, _whisper_token(code))
        for code, ref in self.language_models.items():
            out[code] = Route(code, code, ref, _whisper_token(code))
        if CODE_SWITCHED_ZULU not in out and "zul" in out:  # code-switched isiZulu runs on the isiZulu model
            zul = out["zul"]
            out[CODE_SWITCHED_ZULU] = Route(CODE_SWITCHED_ZULU, zul.model_key, zul.model_ref, zul.whisper_language)
        return out

    def route(self, requested: str) -> Route:
        """The route for a requested language code (any accepted spelling).

        Raises :class:`UnsupportedLanguage` for an unknown code (``unknown=True``) or a known one without a
        model here; the caller names its request field (``.for_field("lang_code")``).
        """
        code = transcription_code(requested)
        routes = self.routes()
        if code in routes:
            return routes[code]
        available = ", ".join(sorted(routes))
        if code in TRANSCRIPTION_CODES:
            target = "zul" if code == CODE_SWITCHED_ZULU else code
            raise UnsupportedLanguage(
                code,
                f"({languages.speech_name(code)}) has no speech model on this server: Whisper base does not cover it. "
                f'An operator can configure one with {SETTING}=\'{{"{target}": "<model directory or Hugging '
                f"Face id>\"}}' (a faster-whisper / CTranslate2 Whisper model fine-tuned for "
                f"{languages.speech_name(target)}). Languages available now: {available}.",
            )
        raise UnsupportedLanguage(
            requested,
            f"Accepted codes: {', '.join(LISTED_CODES)} (available on this server: {available}).",
            unknown=True,
        )

    def detectable(self) -> dict[str, str]:
        """Whisper token -> code, for the languages auto-detection may answer (a served language's kin too)."""
        out: dict[str, str] = {}
        for code, route in self.routes().items():
            if route.whisper_language and code != CODE_SWITCHED_ZULU:
                out.setdefault(route.whisper_language, code)
        for code in list(out.values()):
            lang = _registry(code)
            for kin in lang.whisper_kin if lang else ():
                out.setdefault(kin, code)
        return out

    # ------------------------------------------------------------------ models

    def model(self, key: str = DEFAULT_MODEL) -> Any:
        """The loaded faster-whisper model for ``key`` (loaded on first use)."""
        return self._get(self._models, key, self.cpu_threads, self.parallel_decodes)

    def live_model(self, key: str = DEFAULT_MODEL) -> Any:
        """The instance a live stream's steps decode on: :meth:`model` itself unless ``live_threads`` asks for
        other threads per decode on CPU (then a second instance of the same weights, loaded on first use)."""
        if self.live_threads == self.cpu_threads:
            return self.model(key)
        return self._get(self._live_models, key, self.live_threads, self.live_decodes)

    def _get(self, loaded: dict[str, Any], key: str, threads: int, decodes: int) -> Any:
        model = loaded.get(key)
        if model is not None:
            return model
        with self._lock:
            model = loaded.get(key)
            if model is None:
                ref = self.default_ref if key == DEFAULT_MODEL else self.language_models[key]
                model = self._load(ref, key, threads, decodes)
                loaded[key] = model
        return model

    def _load(self, ref: str, key: str, threads: int, decodes: int) -> Any:
        from faster_whisper import WhisperModel

        started = time.perf_counter()
        try:
            model = WhisperModel(
                ref,
                device=self.device,
                compute_type=self.compute_type,
                cpu_threads=threads,
                num_workers=decodes,
                download_root=str(self.download_root) if self.download_root else None,
                local_files_only=True,  # never download weights at run time
            )
        except Exception as exc:  # noqa: BLE001 - missing directory, no network for a hub id, bad files
            which = (
                "default Whisper model (KHULUMA_WHISPER_MODEL)"
                if key == DEFAULT_MODEL
                else f"speech model for '{key}' ({SETTING})"
            )
            raise Unavailable(
                f"The {which} '{ref}' could not be loaded: {type(exc).__name__}: {exc}. Point the setting at a "
                f"faster-whisper (CTranslate2) model directory."
            ) from None
        log.info(
            "loaded Whisper model %s for %s (%d decodes of %d threads) in %.1f s",
            ref,
            key,
            decodes,
            threads,
            time.perf_counter() - started,
        )
        return model

    def loaded(self) -> list[str]:
        return list(self._models)

    # ------------------------------------------------------------------ VAD

    @staticmethod
    def speech_chunks(
        audio: np.ndarray, *, min_silence_ms: int = 500, pad_ms: int = 200, threshold: float = 0.5
    ) -> list[dict[str, int]]:
        """Silero VAD speech chunks ``{"start": sample, "end": sample}`` of 16 kHz ``audio``."""
        return fw.speech_timestamps(
            audio, threshold=threshold, min_silence_ms=min_silence_ms, min_speech_ms=120, pad_ms=pad_ms
        )

    # ------------------------------------------------------------------ detection

    def detect(self, speech: np.ndarray) -> Detection | None:
        """Language of ``speech`` (16 kHz, speech only) by Whisper's detector over every language it knows: the
        likeliest served language and the mass of all served ones (low when the audio is in a language without a
        model: real isiZulu scores 0.02 to 0.06). None: too little speech, no multilingual model, nothing served."""
        if speech.size < SAMPLE_RATE // 4:
            return None
        model = self.model(DEFAULT_MODEL)
        if not fw.is_multilingual(model):
            return None
        _, _, all_probs = model.detect_language(audio=np.ascontiguousarray(speech[: 30 * SAMPLE_RATE]))
        return self.detection_of([(token, float(p)) for token, p in all_probs])

    def detection_of(self, heard: fw.Languages) -> Detection | None:
        """The served languages' share of Whisper's language probabilities ``heard`` (its tokens, best first): the
        likeliest served language and the mass of all served ones, never renormalised. None: nothing served."""
        allowed = self.detectable()
        scores: dict[str, float] = {}
        for token, p in heard:
            if token in allowed:
                scores[allowed[token]] = scores.get(allowed[token], 0.0) + p
        if not scores:
            return None
        ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
        top = [(token, round(p, 4)) for token, p in heard[:5]]
        return Detection(ranked[0][0], ranked[0][1], ranked, served=min(1.0, sum(scores.values())), heard=top)

    def detect_short(self, speech: np.ndarray) -> Detection | None:
        """:meth:`detect` on a short window (the speech and 5 s of silence, up to 30 s) instead of a padded 30 s
        one: a live segment's language check, at a cost that scales with its length."""
        model = self.live_model(DEFAULT_MODEL)
        if speech.size < SAMPLE_RATE // 4 or not fw.is_multilingual(model):
            return None
        return self.detection_of(fw.short_window_languages(model, speech[: 30 * SAMPLE_RATE]))

    def first_look(self, speech: np.ndarray) -> tuple[Detection | None, str, float]:
        """A live stream's first look at ``speech`` (at most :data:`QUICK_MAX_SECONDS`, packed) before its language
        is known: one encoding of its short window (``whisper_adapter.decode_short_window``) on the live instance
        gives Whisper's detection and a greedy decode in the likeliest served language (its text and mean
        log-probability per token). None and "" when there is too
        little speech, no multilingual model or no served language Whisper can name."""
        model = self.live_model(DEFAULT_MODEL)
        if speech.size < SAMPLE_RATE // 4 or not fw.is_multilingual(model):
            return None, "", float("-inf")
        speech = speech[: int(QUICK_MAX_SECONDS * SAMPLE_RATE)]
        tokens = {code: route.whisper_language for code, route in self.routes().items() if route.whisper_language}
        found: list[Detection | None] = [None]

        def likeliest(heard: fw.Languages) -> str:
            found[0] = self.detection_of(heard)
            return tokens[found[0].code] if found[0] is not None else heard[0][0]

        decoded = fw.decode_short_window(
            model, speech, likeliest, max_tokens=int(8 + QUICK_TOKENS_PER_SECOND * speech.size / SAMPLE_RATE)
        )
        if found[0] is None:
            return None, "", float("-inf")
        return found[0], decoded.text, decoded.avg_logprob

    def _shares_detection(self, route: Route) -> bool:
        """Whether a decode for ``route`` runs on the multilingual default model, whose encoding can also say the
        language (a configured model may be a fine-tune whose detector is not to be trusted)."""
        return route.model_key == DEFAULT_MODEL and fw.is_multilingual(self.model(DEFAULT_MODEL))

    def quick_transcript(self, speech: np.ndarray, route: Route) -> tuple[str, float]:
        """A cheap look at what ``route``'s model makes of up to 30 s of ``speech``: greedy, no timestamps, no word
        times. The text and its mean log-probability per token (-inf when nothing was decoded)."""
        segments = self._greedy(self.model(route.model_key), speech[: 30 * SAMPLE_RATE], route.whisper_language)
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
        if route.whisper_language is None or seconds > QUICK_MAX_SECONDS:
            segments = self._greedy(model, speech, route.whisper_language)
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
                self.detect_short(speech) if detect else None,
                seconds,
            )
        shared = detect and self._shares_detection(route)
        decoded = fw.decode_unpadded(
            model,
            speech,
            route.whisper_language,
            max_tokens=int(8 + QUICK_TOKENS_PER_SECOND * seconds),
            detect=shared,
        )
        detection = self.detection_of(decoded.languages) if shared else self.detect_short(speech) if detect else None
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
        if self._batcher is not None and route.whisper_language:
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
        search, word times), but in a short window (``whisper_adapter.ShortWindowDecoder``): up to
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
        if route.whisper_language is None or speech.size > EXACT_UNPADDED_MAX_SECONDS * SAMPLE_RATE:
            segments = list(self.transcribe(audio, route, chunks, offset=offset))
            return Heard(segments, self.detect_short(speech) if detect else None, seconds)
        before = heard if heard and heard_text.strip() else []
        known = fw.pack_speech(audio, before) if before else np.zeros(0, np.float32)
        if known.size + speech.size > EXACT_UNPADDED_MAX_SECONDS * SAMPLE_RATE:
            before, known = [], np.zeros(0, np.float32)
        shared = detect and not before and self._shares_detection(route)
        self._seed_sampling()
        decoded, languages = self._short_window(route).decode_heard(
            np.concatenate([known, speech]) if before else speech,
            heard_text if before else "",
            known.size / SAMPLE_RATE,
            max_tokens=int(10 + EXACT_TOKENS_PER_SECOND * speech.size / SAMPLE_RATE),
            detect=shared,
        )
        detection = self.detection_of(languages) if shared else self.detect_short(speech) if detect else None
        segments = [_speech_segment(s, offset) for s in fw.restore_times(decoded, before + chunks)]
        return Heard(segments, detection, seconds)

    def _seed_sampling(self) -> None:
        """Seed CTranslate2's sampling before a decode that may fall back to it: the same audio, the same text."""
        if len(self.temperatures) > 1:
            import ctranslate2

            ctranslate2.set_random_seed(self.seed)

    def _short_window(self, route: Route) -> fw.ShortWindowDecoder:
        key = (route.model_key, route.whisper_language)
        found = self._short_windows.get(key)
        if found is None:
            model = self.live_model(route.model_key)
            with self._lock:
                found = self._short_windows.get(key)
                if found is None:
                    assert route.whisper_language is not None
                    found = fw.ShortWindowDecoder(model, route.whisper_language, self.beam_size, self.temperatures)
                    self._short_windows[key] = found
        return found

    def _transcribe_alone(self, audio: np.ndarray, route: Route, chunks: list[dict[str, int]]) -> Iterator[Any]:
        """faster-whisper's sequential decoder over the packed speech (seeking across 30 s windows)."""
        model = self.model(route.model_key)
        speech = fw.pack_speech(audio, chunks)
        self._seed_sampling()
        segments, _info = model.transcribe(
            speech,
            language=route.whisper_language,
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
            (route.model_key, route.whisper_language), fw.window_features(model, pieces), metadata
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

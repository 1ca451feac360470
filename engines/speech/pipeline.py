"""One audio file -> a :class:`~contracts.speech.TranscriptionResult` (the record's content; the caller builds
the record with ``contracts.speech.build_record``).

:class:`TranscriptionPipeline` is plain Python (no Ray, no HTTP, no global settings: it is handed the
``WhisperSettings`` and ``TranscriptionSettings`` sections): the Speech deployment and the batch Ray tasks
call :meth:`TranscriptionPipeline.transcribe`; :func:`get_pipeline` keeps one per process and model
configuration, so models load once per process.

Steps of :meth:`~TranscriptionPipeline.transcribe`:

1. The requested language is checked first (:class:`UnsupportedLanguage` for an unknown code or a language
   without a model), then the file header (not audio / corrupt, empty).
2. Audio is decoded to 16 kHz mono. Without diarisation and music detection it is *streamed*: decoded in 30 s
   blocks and transcribed in windows (``engines.speech.windows``) cut in silence, so memory stays flat for any length.
   Diarisation and music detection need the whole signal (4 bytes per sample, 230 MB per hour): it is built
   from what actually decodes (never from the header's claimed duration) and capped at
   ``transcription.max_whole_audio_seconds`` (:class:`TooLarge` beyond it).
3. Music detection (``engines.speech.music``, optional): music spans are silenced before the VAD, so they are never
   decoded as words; they appear in the timeline (``type: music``) and in ``warnings``.
4. Silero VAD finds speech; only speech is decoded by Whisper, with word timestamps.
5. Language: the requested one, or auto-detected (see :meth:`_choose_language`) and confirmed on the transcript
   with the text language identifier (``engines.text.langid``, optional).
6. Diarisation (``engines.speech.diarise``, optional): speaker turns over the VAD speech; every word gets a speaker.
7. The timeline (``engines.speech.timeline``): speech / music / silence items in time order.

Translation of the transcript is not done here: the Speech deployment asks the Translation deployment.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from contracts.capabilities import LanguageSupport
from contracts.errors import InvalidInput, TimedOut
from contracts.installs import install_hint
from contracts.languages import CODE_SWITCHED_ZULU
from contracts.languages import speech_name as language_name
from contracts.quality import UNMEASURED, Quality, published, speech_quality
from contracts.settings import SpeechSettings, TranscriptionSettings, WhisperSettings
from contracts.speech import Segment, StreamRequest, StreamStep, TranscriptionResult, Withheld
from engines.models.catalogue import catalogued
from engines.speech import diarise as diarisation
from engines.speech import music as music_detection
from engines.speech.audio import SAMPLE_RATE, iter_audio, load_audio, load_pcm16, probe
from engines.speech.first_language import Evidence, FirstLanguage
from engines.speech.language_choice import (
    JUDGE_MIN_SECONDS,
    LANGID_CONFIDENCE,
    SHORT_SPEECH_SECONDS,
    UNCERTAIN_DETECTION,
    LanguageChoice,
    Verdict,
)
from engines.speech.recognition import CTC, WHISPER, Detection, Heard, Route, SpeechSegment
from engines.speech.routing import SETTING as ROUTE_SETTING
from engines.speech.routing import SpeechModels, resolve
from engines.speech.timeline import assign_speakers, build_timeline, join_text, outside, segment, word
from engines.speech.whisper import DEFAULT_MODEL, LISTED_CODES, WhisperRecognizer
from engines.speech.whisper_layout import BASE_MODEL_NAME, build_recognizer
from engines.speech.windows import Window, array_blocks, last_pause, speech_only, windows

log = logging.getLogger(__name__)

STREAM_PAD_MS = 100  # a live stream's VAD chunks are padded this much (files: 200), so shorter pauses stay visible
# A live step whose speech ended at least this long before the buffer's end (less than a commit pause) decodes
# the uncommitted speech exactly, not quickly: if the stream ends with no more speech, that is its final, and the
# last step returns it without decoding again (StreamStep.exact_until).
STREAM_ENDING_SILENCE_MS = 150
STREAM_ENDING_LOOK_SECONDS = 1.0  # how much of the buffer's end the VAD looks at for that silence
STREAM_DETECT_SECONDS = SHORT_SPEECH_SECONDS  # speech a live stream's language is decided on, never sooner
# South African languages beyond the spec's that /api/v1/models lists too (served, or how to add a model)
OTHER_SA_CODES = ("xho", "nso", "tsn", "tso", "ssw", "ven", "nbl")


@dataclass
class _Pass:
    """What one transcription pass over the audio produced."""

    route: Route | None = None
    detection: Detection | None = None
    segments: list[SpeechSegment] = field(default_factory=list)
    speech: list[tuple[float, float]] = field(default_factory=list)  # VAD speech spans, seconds
    samples: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return join_text(self.segments)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


@dataclass
class _Decoded:
    """Segments a streaming step decoded, screened, in the language its verdict gave."""

    segments: list[SpeechSegment] = field(default_factory=list)
    verdict: Verdict | None = None
    labelled: bool = False  # each segment carries its language (the stream's language was detected, not given)

    @property
    def text(self) -> str:
        return join_text(self.segments)

    def out(self) -> list[Segment]:
        out = [segment(s) for s in self.segments]
        for s in out:
            if self.labelled and self.verdict is not None and self.verdict.route is not None:
                s.language_code = self.verdict.route.code
            if self.verdict is not None and self.verdict.message:
                s.warnings.append(self.verdict.message)
        return out


class _Step:
    """The decodes of one streaming step in ``route``'s language, screened by the hallucination guards and, where
    the stream's language was detected (``judge``), judged segment by segment (``LanguageChoice.judge``)."""

    def __init__(
        self,
        pipeline: TranscriptionPipeline,
        audio: np.ndarray,
        route: Route,
        offset: float,
        judge: bool,
        labelled: bool,
    ) -> None:
        self.pipeline, self.audio, self.route, self.offset, self.judge = pipeline, audio, route, offset, judge
        self.labelled = labelled  # segments carry their language (the stream's was detected)
        self.withheld: list[Withheld] = []
        self.warnings: list[str] = []

    def exact(
        self, chunks: list[dict[str, int]], heard: list[dict[str, int]], heard_text: str, *, committed: bool = True
    ) -> _Decoded:
        """The exact decode of ``chunks`` (after ``heard``, committed as ``heard_text``), judged: speech in a
        language without a model is dropped, and listed as withheld when it is ``committed`` (a decode of
        uncommitted speech is only a look ahead)."""
        if not chunks:
            return _Decoded()
        decode = functools.partial(self.pipeline.models.exact_segments, self.audio, chunks=chunks, offset=self.offset)
        result = decode(route=self.route, heard=heard, heard_text=heard_text, detect=self.judge)
        verdict = Verdict(self.route)
        if self.judge:
            verdict = self.pipeline.choice.judge(result, self.route, speech_only(self.audio, chunks))
            if verdict.route is None:
                if committed:
                    self._withhold(chunks, verdict)
                return _Decoded(verdict=verdict, labelled=self.labelled)
            if verdict.route != self.route:  # clearly another served language: decoded in it, on its own
                result = decode(route=verdict.route)
        return self._screened(result, verdict)

    def quick(self, start: int, chunks: list[dict[str, int]], ready: Heard | None = None) -> _Decoded:
        """The partial of ``chunks`` (the buffer from sample ``start``; ``ready``: that partial, decoded already);
        where judged, only of speech long enough to judge that is in the stream's language."""
        if not chunks:
            return _Decoded()
        result = ready or self.pipeline.models.quick_segments(
            self.audio[start:],
            self.route,
            _shift(chunks, -start),
            offset=self.offset + start / SAMPLE_RATE,
            detect=self.judge,
        )
        verdict = Verdict(self.route)
        if self.judge:
            verdict = self.pipeline.choice.judge(result, self.route)
            if result.seconds < JUDGE_MIN_SECONDS or verdict.route != self.route or verdict.message:
                return _Decoded()
        return self._screened(result, verdict)

    def _screened(self, result: Heard, verdict: Verdict) -> _Decoded:
        kept, found = self.pipeline.models.screen(verdict.route or self.route, result.segments)
        self.warnings += [w for w in found if w not in self.warnings]
        return _Decoded(kept, verdict, self.labelled)

    def _withhold(self, chunks: list[dict[str, int]], verdict: Verdict) -> None:
        self.withheld.append(
            Withheld(
                start_time=round(self.offset + chunks[0]["start"] / SAMPLE_RATE, 3),
                end_time=round(self.offset + chunks[-1]["end"] / SAMPLE_RATE, 3),
                language_code=verdict.likely,
                detail=verdict.message,
            )
        )


class TranscriptionPipeline:
    """Transcribes files into :class:`TranscriptionResult`; thread-safe, one per process is enough."""

    def __init__(
        self,
        whisper: WhisperSettings,
        transcription: TranscriptionSettings,
        data_dir: Path,
        *,
        speech: SpeechSettings | None = None,
        recognizer: WhisperRecognizer | None = None,
    ) -> None:
        self.whisper = whisper
        self.speech = speech or SpeechSettings()
        self.data_dir = Path(data_dir)  # where the default Whisper weights are unpacked
        self.window_seconds = transcription.window_seconds
        self.diarisation_threshold = transcription.diarisation_threshold
        self.max_whole_audio_seconds = transcription.max_whole_audio_seconds
        self.served_floor = transcription.served_language_floor
        self.commit_silence_ms = transcription.stream_commit_silence_ms
        self._whisper = recognizer
        self._models: SpeechModels | None = None
        self._first: FirstLanguage | None = None
        self._lock = threading.Lock()
        self.choice = LanguageChoice(lambda: self.models, transcription, self.model_name)

    # ------------------------------------------------------------------ model

    @property
    def models(self) -> SpeechModels:
        """Every speech model, by language (``engines.speech.routing``); built on first use, loaded lazily."""
        if self._models is None:
            with self._lock:
                if self._models is None:
                    given = self._whisper
                    self._models = (
                        SpeechModels(given) if given else shared_models(self.whisper, self.speech, self.data_dir)
                    )
        return self._models

    @property
    def first_language(self) -> FirstLanguage:
        """A live stream's first-language evidence and the rule that settles it early (``first_language.py``)."""
        if self._first is None:
            self._first = FirstLanguage(self.models)
        return self._first

    def _early(self, evidence: Evidence) -> tuple[Detection, Route]:
        """The detection and route of speech the early rule found unmistakable."""
        assert evidence.code is not None
        detection = Detection(
            evidence.code,
            evidence.probability,
            [(evidence.code, evidence.probability)],
            served=evidence.served,
            heard=evidence.heard,
            signal="whisper + transcript text language id",
        )
        return detection, self.models.routes()[evidence.code]

    @property
    def recognizer(self) -> WhisperRecognizer:
        """Whisper's models (the default one, and the per-language Whisper models)."""
        return self.models.whisper

    @property
    def model_name(self) -> str:
        return self.whisper.model or BASE_MODEL_NAME

    def warm_up(self) -> None:
        """Load the default model now, and its live steps' instance (deployments call this at start so the first
        request or stream is not slow)."""
        self.recognizer.model(DEFAULT_MODEL)
        self.recognizer.live_model(DEFAULT_MODEL)
        self.models.warm_up()
        # a live stream's first look runs on an encoding of its own length: its first call sets up the decoder
        self.first_language.evidence(np.random.default_rng(0).normal(0, 0.05, 2 * SAMPLE_RATE).astype(np.float32))

    def languages(self) -> list[LanguageSupport]:
        """Per-language truth for ``GET /api/v1/models``: the spec's languages and the other South African ones,
        each with the model that serves it, its family and licence, and its quality (measured here, published, or
        neither); then any other language an operator configured."""
        routes = self.models.routes()
        listed = [*LISTED_CODES, *(c for c in OTHER_SA_CODES if c not in LISTED_CODES)]
        out = [self._support(code, routes.get(code)) for code in listed]
        out += [self._support(code, route) for code, route in routes.items() if code not in listed]
        return out

    def _support(self, code: str, route: Route | None) -> LanguageSupport:
        name = language_name(code) if code in LISTED_CODES or code in OTHER_SA_CODES else code
        if route is None:
            target = "zul" if code == CODE_SWITCHED_ZULU else code
            hint = (
                f"Whisper has no {language_name(target)}. Add a model: {install_hint('speech')}; or any model "
                f'directory with {ROUTE_SETTING}=\'{{"{target}": "<dir or registered name>"}}\'.'
            )
            return LanguageSupport.of(code, False, None, hint, name=name)
        if route.family == CTC:
            model = self.models.model_of(route)
            where = f"A CTC model ({model.recognizer.runtime}) from {model.source}."
            if code == CODE_SWITCHED_ZULU and route.model_key == "ctc:zul":
                where += " Runs on the isiZulu model."
            return LanguageSupport.of(
                code,
                True,
                route.model_ref,
                where,
                name=name,
                quality=self._quality(route),
                family=CTC,
                licence=model.licence or "not stated (a local directory: see its model card)",
            )
        model_name = self.model_name if route.model_key == DEFAULT_MODEL else route.model_ref
        note = None
        if code == CODE_SWITCHED_ZULU and route.model_key != CODE_SWITCHED_ZULU:
            note = "Runs on the isiZulu model."
        elif route.whisper_language is None:
            note = "Auto-detection reaches it only through the text language identifier."
        quality = self._quality(route)
        if quality.poor:
            note = f"Poor on real speech: {quality.note}"
        licence = "MIT (OpenAI Whisper)" if route.model_key == DEFAULT_MODEL and not self.whisper.model else None
        return LanguageSupport.of(
            code, True, model_name, note, name=name, quality=quality, family=WHISPER, licence=licence
        )

    def _quality(self, route: Route) -> Quality:
        """The quality of ``route`` on real speech: measured here for the offline Whisper base; a CTC model's
        publisher's figure where the catalogue knows one; else unmeasured, said plainly."""
        if route.family == CTC:
            model = self.models.model_of(route)
            known = catalogued(model.source)
            figure = (
                known.published_figure("zul" if route.code == CODE_SWITCHED_ZULU else route.code) if known else None
            )
            if known is not None and (figure is not None or known.published):
                return published(known.published_metric, figure, f"{known.hf_id}: {known.published}")
            return UNMEASURED
        on_base = route.model_key == DEFAULT_MODEL and not self.whisper.model
        return speech_quality(route.code) if on_base else UNMEASURED

    def _quality_warning(self, route: Route) -> str | None:
        quality = self._quality(route)
        if not quality.poor:
            return None
        return (
            f"Transcripts in {language_name(route.code)} from {self.model_name} are unreliable: {quality.note} "
            f"(WER {quality.value:.2f} on {quality.data}). Check them before relying on them, or configure a model "
            f"for the language in {ROUTE_SETTING}."
        )

    # ------------------------------------------------------------------ the file route

    def transcribe(
        self,
        path: Path | str,
        language: str | None = None,
        diarise: bool = False,
        detect_music: bool = False,
        *,
        timeout_s: float | None = None,
    ) -> TranscriptionResult:
        """What transcribing the file at ``path`` produced.

        Raises domain errors: :class:`UnsupportedLanguage` / :class:`InvalidInput` (bad language, empty audio),
        :class:`UnsupportedMedia` (not audio), :class:`Unavailable` (a model cannot load), :class:`TimedOut`
        (past ``timeout_s``), :class:`TooLarge` (diarisation or music detection on audio that decodes to more than
        ``max_whole_audio_seconds``).
        """
        started = time.time()
        deadline = started + timeout_s if timeout_s else None
        path = Path(path)
        requested = self.models.route(language) if language else None
        info = probe(path)
        warnings: list[str] = []
        music: list[tuple[float, float]] = []
        audio: np.ndarray | None = None
        if diarise or detect_music:
            audio = load_audio(path, info, max_seconds=self.max_whole_audio_seconds)
            if detect_music:
                music = self._detect_music(audio, warnings)
                for start, end in music:  # silence music so neither VAD nor Whisper sees it
                    audio[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)] = 0.0

        def file_windows() -> Iterator[Window]:
            blocks = array_blocks(audio) if audio is not None else iter_audio(path, 30.0, info)
            return windows(blocks, self.window_seconds, self.models.speech_chunks)

        result = self._pass(file_windows, requested, deadline)
        if result.samples == 0:
            raise InvalidInput("The audio file contains no samples (zero-length audio).")
        if requested is None and result.route is not None:
            result = self._confirm_language(result, file_windows, deadline)

        words = outside([w for s in result.segments for w in s.words], music)
        if audio is not None and diarise:
            assign_speakers(words, diarisation.diarise(audio, result.speech, threshold=self.diarisation_threshold))
        duration = round(result.samples / SAMPLE_RATE, 3)
        text = "".join(w.word for w in words).strip() if words else join_text(result.segments)
        code = result.route.code if result.route else "und"  # no route: no speech to detect a language in
        warnings = info.warnings + warnings + result.warnings
        poor = self._quality_warning(result.route) if result.route else None
        if poor and text:
            warnings.append(poor)
        if not text:
            warnings.append("No speech was recognised in the audio.")
        return TranscriptionResult(
            file_size=info.size_bytes,
            audio_length_seconds=duration,
            sample_rate=info.sample_rate,
            channels=info.channels,
            frame_rate=info.frame_rate,
            mime_type=info.mime_type,
            language_code=code,
            language_probability=round(result.detection.probability, 4) if result.detection else None,
            language_detected_by=result.detection.signal if result.detection else None,
            text=text,
            words=[word(w) for w in words],
            diarised=diarise,
            timeline=build_timeline(result.segments, words, music, duration, diarise),
            warnings=warnings,
            model=self.model_name
            if not result.route or result.route.model_key == DEFAULT_MODEL
            else result.route.model_ref,
            processing_seconds=round(time.time() - started, 3),
        )

    # ------------------------------------------------------------------ streaming (arrays of PCM)

    def transcribe_step(self, request: StreamRequest) -> StreamStep:
        """One streaming step as the live routes send it: its PCM (resampled to 16 kHz) through
        :meth:`transcribe_array` with the request's options; no audio, no decoding."""
        audio = load_pcm16(request.pcm, request.sample_rate)
        if audio.size == 0:
            return StreamStep(language_code=request.language or "", cut_seconds=0.0)
        return self.transcribe_array(
            np.ascontiguousarray(audio),
            request.language,
            offset=request.offset,
            commit_before=request.commit_before,
            final=request.final,
            context_seconds=request.context_seconds,
            context_text=request.context_text,
            exact_tail=(request.exact_tail, request.exact_until) if request.exact_tail else None,
            judge=request.judge,
        )

    def transcribe_array(
        self,
        audio: np.ndarray,
        language: str | None = None,
        *,
        offset: float = 0.0,
        commit_before: float | None = None,
        final: bool = False,
        context_seconds: float = 0.0,
        context_text: str = "",
        exact_tail: tuple[list[Segment], float] | None = None,
        judge: bool = False,
    ) -> StreamStep:
        """Transcribe an in-memory 16 kHz buffer (streaming). ``commit_before`` (seconds into ``audio``): the
        audio before the last pause of at least ``stream_commit_silence_ms`` that starts before it is committed:
        decoded exactly (beam search, word times, in a short window: :meth:`WhisperRecognizer.exact_segments`) into
        ``final`` segments, and the answer says where the caller may cut (``cut_seconds``, the middle of that pause;
        0 when there is none). The rest (the uncommitted tail) gets a cheap partial
        (:meth:`WhisperRecognizer.quick_segments`: greedy, no timestamps) in ``pending``. ``final`` (the end of the
        stream): everything is decoded exactly, into ``pending`` (the caller takes it). ``context_seconds``: the
        buffer's head that the previous step committed, as ``context_text``: the exact decode hears it first and
        starts with its text, so a segment cut at a short pause keeps its sentence; it is never committed again.

        Without ``language``, the language is detected as for files, and refused the same way
        (:class:`LanguageNotServed`) once there are :data:`STREAM_DETECT_SECONDS` of speech or the stream ended
        (``final``), never sooner: a call that opens with "Hello" and goes on in isiZulu is not English. Before
        that the step is not ``language_settled``, and audio that does not sound like a served language, or less
        than ``JUDGE_MIN_SECONDS`` of speech, is not decoded. ``judge`` (the stream's language was detected, not
        given): every committed segment's language is checked on its own speech (``LanguageChoice.judge``): one in
        a language without a speech model is ``withheld``, one clearly in another served language is decoded in
        it, and a partial is shown only of speech judged to be in the stream's language. The hallucination guards
        run on every step, partials included.

        A step that commits nothing, whose speech ended :data:`STREAM_ENDING_SILENCE_MS` or more before the buffer's
        end (shorter than a commit pause), decodes the uncommitted speech exactly instead of quickly, as the last
        step would, and says so (``exact_until``, seconds of the stream): the utterance may be over. ``exact_tail``
        (those segments and that time, given back by the last step): when no speech came after it, the last step
        returns them without decoding again, so the end of an utterance waits only for the VAD."""
        route = self.models.route(language) if language else None
        chunks = self.models.speech_chunks(audio, min_silence_ms=self.commit_silence_ms, pad_ms=STREAM_PAD_MS)
        detection = None
        warnings: list[str] = []
        settled, confident = True, True
        early: Heard | None = None  # the decode that settled the language early, in it
        if route is None:
            speech = speech_only(audio, chunks) if chunks else np.zeros(0, np.float32)
            if not final and speech.size < STREAM_DETECT_SECONDS * SAMPLE_RATE:
                evidence = self.first_language.evidence(speech)
                if not self.first_language.decides(evidence):  # unsure: nothing shown, ask again with more speech
                    return StreamStep(
                        language_code="",
                        language_settled=False,
                        cut_seconds=0.0,
                        candidate=_candidate(evidence, chunks, offset),
                    )
                detection, route = self._early(evidence)
                early = Heard(_candidate_segments(evidence, chunks, offset), detection, evidence.speech_s)
            else:
                detection, route = self.choice.decide(speech, warnings)
                # Whisper's detection on all this speech placed it in a served language: not judged again here
                confident = detection is not None and detection.served >= self.served_floor
        # a step that settled the language on Whisper's detection of this very speech does not judge it again; one
        # that settled it on weaker evidence (a fluent-looking decode, a short clip), or a partial before it settles,
        # is judged segment by segment
        step = _Step(self, audio, route, offset, judge and (language is not None or not confident), judge)
        context = int(context_seconds * SAMPLE_RATE)  # the buffer's committed head, heard again as context
        chunks = _split_at(chunks, context)  # it ended in a pause, which the VAD may not find again on this buffer
        cut = 0
        if commit_before is not None and not final:
            min_gap = max(0, self.commit_silence_ms - 2 * STREAM_PAD_MS) * SAMPLE_RATE // 1000  # chunks are padded
            cut = last_pause(chunks, int(commit_before * SAMPLE_RATE), min_gap)
            cut = cut if cut > context else 0
        heard = [c for c in chunks if c["end"] <= context]
        head = [c for c in chunks if context < c["end"] <= cut]
        tail = [c for c in chunks if c["end"] > max(cut, context)]
        final_segments = step.exact(head, heard, context_text).out()
        exact_until = 0.0
        if final and exact_tail is not None and not self._speech_after(audio, exact_tail[1] - offset):
            # decoded exactly, screened and judged by the step before; no speech came after it
            pending_out = list(exact_tail[0])
            pending_text = " ".join(s.text for s in pending_out if s.text)
        else:
            if final:  # nothing was cut: the tail follows what was heard
                pending = step.exact(tail, heard, context_text)
            elif not cut and tail and commit_before is not None and self._speech_ended(audio):
                pending = step.exact(tail, heard, context_text, committed=False)
                if pending.verdict is None or pending.verdict.route is not None:  # the last step may return it
                    exact_until = round(offset + audio.size / SAMPLE_RATE, 3)
            else:
                pending = step.quick(max(cut, context), tail, early)
            pending_out, pending_text = pending.out(), pending.text
        poor = self._quality_warning(route) if final_segments or pending_out else None
        return StreamStep(
            language_code=route.code,
            language_probability=round(detection.probability, 4) if detection else None,
            language_settled=settled,
            cut_seconds=round(cut / SAMPLE_RATE, 3),
            final=final_segments,
            pending=pending_out,
            pending_text=pending_text,
            exact_until=exact_until,
            withheld=step.withheld,
            warnings=warnings + step.warnings + ([poor] if poor else []),
        )

    def _speech_after(self, audio: np.ndarray, seconds: float) -> bool:
        """Whether the VAD hears speech in the buffer after ``seconds``."""
        return bool(self._short_pause_chunks(audio[max(0, int(seconds * SAMPLE_RATE)) :]))

    def _speech_ended(self, audio: np.ndarray) -> bool:
        """Whether the buffer's last speech ended :data:`STREAM_ENDING_SILENCE_MS` or more before its end (the VAD
        over its last :data:`STREAM_ENDING_LOOK_SECONDS`)."""
        last = audio[-int(STREAM_ENDING_LOOK_SECONDS * SAMPLE_RATE) :]
        chunks = self._short_pause_chunks(last)
        ended = chunks[-1]["end"] if chunks else 0
        return (last.size - ended) * 1000 >= STREAM_ENDING_SILENCE_MS * SAMPLE_RATE

    def _short_pause_chunks(self, audio: np.ndarray) -> list[dict[str, int]]:
        """The VAD's speech chunks of ``audio``, unpadded, a pause of half :data:`STREAM_ENDING_SILENCE_MS`
        ending one: how the end of a stream's speech is found."""
        return self.models.speech_chunks(audio, min_silence_ms=STREAM_ENDING_SILENCE_MS // 2, pad_ms=0)

    # ------------------------------------------------------------------ passes

    def _pass(
        self,
        file_windows: Callable[[], Iterator[Window]],
        route: Route | None,
        deadline: float | None,
        detection: Detection | None = None,
    ) -> _Pass:
        result = _Pass(route=route, detection=detection)
        for window in file_windows():
            _check_deadline(deadline)
            result.samples = window.offset + window.audio.size
            start_s = window.start_seconds
            result.speech += [
                (round(start_s + c["start"] / SAMPLE_RATE, 3), round(start_s + c["end"] / SAMPLE_RATE, 3))
                for c in window.chunks
            ]
            if not window.chunks:
                continue
            if result.route is None:
                result.detection, result.route = self._choose_language(window, result.warnings)
            result.segments += self.models.transcribe(
                window.audio, result.route, window.chunks, offset=start_s, deadline=deadline
            )
        if result.route is not None:
            result.segments, found = self.models.screen(result.route, result.segments)
            result.warnings += found
        return result

    # ------------------------------------------------------------------ language choice

    def _choose_language(self, window: Window, warnings: list[str]) -> tuple[Detection | None, Route]:
        """Auto-detection on the first window with speech (``LanguageChoice.decide``)."""
        return self.choice.decide(speech_only(window.audio, window.chunks), warnings)

    def _confirm_language(
        self, result: _Pass, file_windows: Callable[[], Iterator[Window]], deadline: float | None
    ) -> _Pass:
        """Check an uncertain audio detection against the transcript's text language; re-run once if the
        text is clearly in another language that has a model."""
        detection = result.detection
        chosen = result.route.code if result.route else ""
        text = result.text
        if detection is None or detection.probability >= UNCERTAIN_DETECTION or len(text.split()) < 4:
            return result
        guess = self.choice.text_language(text)
        if guess is None:
            return result
        language, confidence = guess
        routes = self.models.routes()
        if language == chosen or confidence < LANGID_CONFIDENCE:
            return result
        if language not in routes:
            name = language_name(language) if language in LISTED_CODES else language
            result.warnings.append(
                f"The transcript looks like {name}, which has no speech model here "
                f"({ROUTE_SETTING}); it was transcribed as {chosen}."
            )
            return result
        log.info("language %s (p=%.2f) overruled by text LID %s (%.2f)", chosen, detection.probability, *guess)
        found = Detection(language, confidence, [guess], signal="whisper transcript + text language id")
        again = self._pass(file_windows, routes[language], deadline, found)
        again.warnings.insert(
            0,
            f"Audio language detection was uncertain ({chosen}, p={detection.probability:.2f});"
            f" the transcript's language ({language}) was used.",
        )
        return again

    # ------------------------------------------------------------------ music

    @staticmethod
    def _detect_music(audio: np.ndarray, warnings: list[str]) -> list[tuple[float, float]]:
        spans = [(float(s), float(e)) for s, e in music_detection.detect_music(audio)]
        if spans:
            total = sum(e - s for s, e in spans)
            where = ", ".join(f"{_clock(s)}-{_clock(e)}" for s, e in spans[:10])
            more = f" and {len(spans) - 10} more" if len(spans) > 10 else ""
            warnings.append(
                f"Music detected (e.g. music on hold) in {len(spans)} span(s), {total:.1f} s in all: "
                f"{where}{more}; music is not transcribed."
            )
        return spans


# ---------------------------------------------------------------------------------------------- helpers


def _split_at(chunks: list[dict[str, int]], sample: int) -> list[dict[str, int]]:
    """``chunks`` with the one that spans ``sample`` (if any) cut in two there."""
    out: list[dict[str, int]] = []
    for c in chunks:
        if c["start"] < sample < c["end"]:
            out += [{**c, "end": sample}, {**c, "start": sample}]
        else:
            out.append(c)
    return out


def _candidate_segments(evidence: Evidence, chunks: list[dict[str, int]], offset: float) -> list[SpeechSegment]:
    """The first-language decode as the partial of the speech ``chunks`` (one segment, no word times)."""
    if not evidence.text or not chunks:
        return []
    start, end = offset + chunks[0]["start"] / SAMPLE_RATE, offset + chunks[-1]["end"] / SAMPLE_RATE
    return [SpeechSegment(round(start, 3), round(end, 3), evidence.text, [], evidence.logprob)]


def _candidate(evidence: Evidence, chunks: list[dict[str, int]], offset: float) -> list[Segment]:
    """What an unsettled step decoded, for the next step's agreement only (``StreamStep.candidate``)."""
    return [segment(s) for s in _candidate_segments(evidence, chunks, offset)]


def _shift(chunks: list[dict[str, int]], by: int) -> list[dict[str, int]]:
    return [{**c, "start": max(0, c["start"] + by), "end": c["end"] + by} for c in chunks]


_pipelines: dict[tuple[str, ...], TranscriptionPipeline] = {}
_models: dict[tuple[str, ...], SpeechModels] = {}
_cache_lock = threading.Lock()


def shared_models(whisper: WhisperSettings, speech: SpeechSettings, data_dir: Path) -> SpeechModels:
    """One :class:`SpeechModels` per process and model configuration: pipelines that differ only in their limits
    share the loaded models."""
    key = (str(data_dir), whisper.model_dump_json(), speech.model_dump_json())
    with _cache_lock:
        models = _models.get(key)
        if models is None:
            ctc, whisper_refs = resolve(speech.language_models, Path(data_dir), speech.ctc_cpu_threads)
            merged = whisper.model_copy(update={"language_models": {**whisper.language_models, **whisper_refs}})
            models = _models[key] = SpeechModels(build_recognizer(merged, Path(data_dir)), ctc)
    return models


def get_pipeline(
    whisper: WhisperSettings,
    transcription: TranscriptionSettings,
    data_dir: Path,
    speech: SpeechSettings | None = None,
) -> TranscriptionPipeline:
    """One pipeline per process and settings (what Ray tasks and deployments use), keyed by the settings
    themselves; its models are :func:`shared_models`."""
    speech = speech or SpeechSettings()
    key = (str(data_dir), whisper.model_dump_json(), transcription.model_dump_json(), speech.model_dump_json())
    with _cache_lock:
        pipeline = _pipelines.get(key)
        if pipeline is None:
            pipeline = _pipelines[key] = TranscriptionPipeline(whisper, transcription, data_dir, speech=speech)
    return pipeline


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.time() > deadline:
        raise TimedOut("Transcription took longer than the time limit.")

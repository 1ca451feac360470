"""A live step: one decode of a live stream's buffer (16 kHz) -> a :class:`~contracts.speech.StreamStep`
(:meth:`LiveSteps.step`, which the Speech deployment's ``live_step`` runs; the live services call it after every
few seconds of audio, ``serve_app.services.live.steps.live_step``).

``commit_before`` (seconds into the buffer): the audio before the last pause of at least
``stream_commit_silence_ms`` that starts before it is committed: decoded exactly (``Recognizer.exact_segments``:
Whisper's beam search with word times in a short window; a CTC model's one pass) into ``final`` segments, and the
answer says where the caller may cut (``cut_seconds``, the middle of that pause; 0 when there is none). The rest
(the uncommitted tail) gets a cheap partial (``Recognizer.quick_segments``: Whisper's greedy decode without
timestamps) in ``pending``. ``final`` (the end of the stream): everything is decoded exactly, into ``pending`` (the
caller takes it). ``context_seconds``: the buffer's head that the previous step committed, as ``context_text``: the
exact decode hears it first and starts with its text, so a segment cut at a short pause keeps its sentence; it is
never committed again.

Without a language, a step settles the language when its speech is unmistakably in a served language
(``engines.speech.first_language``), else once there are :data:`STREAM_DETECT_SECONDS` of speech or the stream ended
(``final``), as for files, and refused the same way (:class:`LanguageNotServed`). Until then the step is not
``language_settled``: nothing is shown, and its decode in the likeliest served language is handed back only as the
``candidate`` the next step agrees with. ``judge`` (the stream's language was
detected, not given): every committed segment's language is checked on its own speech (``LanguageChoice.judge``):
one in a language without a speech model is ``withheld``, one clearly in another served language is decoded in it,
and a partial is shown only of speech judged to be in the stream's language. The route's family's guards
(``Recognizer.screen``) run on every step, partials included.

A step that commits nothing, whose speech ended :data:`STREAM_ENDING_SILENCE_MS` or more before the buffer's end
(shorter than a commit pause), decodes the uncommitted speech exactly instead of quickly, as the last step would,
and says so (``exact_until``, seconds of the stream): the utterance may be over. A family whose partial is its
exact decode (``Recognizer.partial_is_exact``: a CTC model's one pass) does so on every step that commits
nothing. ``exact_tail`` (those segments and that time, given back by the last step): when no speech came after it,
the last step returns them without decoding again, so the end of an utterance waits only for the VAD.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from contracts.settings import SpeechSettings
from contracts.speech import Segment, StreamRequest, StreamStep, Withheld
from engines.speech.audio import SAMPLE_RATE, load_pcm16
from engines.speech.first_language import Evidence, FirstLanguage
from engines.speech.language_choice import JUDGE_MIN_SECONDS, SHORT_SPEECH_SECONDS, LanguageChoice, Verdict
from engines.speech.listing import quality_warning
from engines.speech.recognition import Chunk, Detection, Heard, Route, SpeechSegment
from engines.speech.routing import SpeechModels
from engines.speech.step_order import StepOrder, replica_cores
from engines.speech.timeline import join_text, segment
from engines.speech.vad import Vad
from engines.speech.windows import last_pause, speech_only

STREAM_PAD_MS = 100  # a live stream's VAD chunks are padded this much (files: 200), so shorter pauses stay visible
# A live step whose speech ended at least this long before the buffer's end (less than a commit pause) decodes
# the uncommitted speech exactly, not quickly: if the stream ends with no more speech, that is its final, and the
# last step returns it without decoding again (StreamStep.exact_until).
STREAM_ENDING_SILENCE_MS = 150
STREAM_ENDING_LOOK_SECONDS = 1.0  # how much of the buffer's end the VAD looks at for that silence
STREAM_DETECT_SECONDS = SHORT_SPEECH_SECONDS  # speech the file's rule decides a live stream's language on


@dataclass
class _Decoded:
    """Segments a live step decoded, screened, in the language its verdict gave."""

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
    """The decodes of one live step in ``route``'s language, screened by its family's guards and, where the
    stream's language was detected (``judge``), judged segment by segment (``LanguageChoice.judge``)."""

    def __init__(
        self,
        models: SpeechModels,
        choice: LanguageChoice,
        audio: np.ndarray,
        route: Route,
        offset: float,
        judge: bool,
        labelled: bool,
    ) -> None:
        self.models, self.choice = models, choice
        self.audio, self.route, self.offset, self.judge = audio, route, offset, judge
        self.labelled = labelled  # segments carry their language (the stream's was detected)
        self.withheld: list[Withheld] = []
        self.warnings: list[str] = []

    def exact(self, chunks: list[Chunk], heard: list[Chunk], heard_text: str, *, committed: bool = True) -> _Decoded:
        """The exact decode of ``chunks`` (after ``heard``, committed as ``heard_text``), judged: speech in a
        language without a model is dropped, and listed as withheld when it is ``committed`` (a decode of
        uncommitted speech is only a look ahead)."""
        if not chunks:
            return _Decoded()
        decode = functools.partial(self.models.exact_segments, self.audio, chunks=chunks, offset=self.offset)
        result = decode(route=self.route, heard=heard, heard_text=heard_text, detect=self.judge)
        verdict = Verdict(self.route)
        if self.judge:
            verdict = self.choice.judge(result, self.route, speech_only(self.audio, chunks))
            if verdict.route is None:
                if committed:
                    self._withhold(chunks, verdict)
                return _Decoded(verdict=verdict, labelled=self.labelled)
            if verdict.route != self.route:  # clearly another served language: decoded in it, on its own
                result = decode(route=verdict.route)
        return self._screened(result, verdict)

    def quick(self, start: int, chunks: list[Chunk], ready: Heard | None = None) -> _Decoded:
        """The partial of ``chunks`` (the buffer from sample ``start``; ``ready``: that partial, decoded already);
        where judged, only of speech long enough to judge that is in the stream's language."""
        if not chunks:
            return _Decoded()
        result = ready or self.models.quick_segments(
            self.audio[start:],
            self.route,
            _shift(chunks, -start),
            offset=self.offset + start / SAMPLE_RATE,
            detect=self.judge,
        )
        verdict = Verdict(self.route)
        if self.judge:
            verdict = self.choice.judge(result, self.route)
            if result.seconds < JUDGE_MIN_SECONDS or verdict.route != self.route or verdict.message:
                return _Decoded()
        return self._screened(result, verdict)

    def _screened(self, result: Heard, verdict: Verdict) -> _Decoded:
        kept, found = (verdict.route or self.route).recognizer.screen(result.segments)
        self.warnings += [w for w in found if w not in self.warnings]
        return _Decoded(kept, verdict, self.labelled)

    def _withhold(self, chunks: list[Chunk], verdict: Verdict) -> None:
        self.withheld.append(
            Withheld(
                start_time=round(self.offset + chunks[0]["start"] / SAMPLE_RATE, 3),
                end_time=round(self.offset + chunks[-1]["end"] / SAMPLE_RATE, 3),
                language_code=verdict.likely,
                detail=verdict.message,
            )
        )


@dataclass
class _Language:
    """A live step's language: its route, the detection that settled it (None: given), whether that detection was
    Whisper's on all this speech placing it in a served language (``confident``), and the decode that settled it
    early, in it (``early``)."""

    route: Route
    detection: Detection | None = None
    confident: bool = True
    early: Heard | None = None


class LiveSteps:
    """The live steps of one pipeline: its language ``choice`` (and its speech models), ``vad`` and ``transcription``
    settings (the commit pause, the served-language floor); thread-safe."""

    def __init__(self, choice: LanguageChoice, speech: SpeechSettings, vad: Vad) -> None:
        self.choice = choice
        self.vad = vad
        self.served_floor = speech.served_language_floor
        self.commit_silence_ms = speech.stream_commit_silence_ms
        self._first: FirstLanguage | None = None
        self.order = StepOrder(replica_cores())

    @property
    def models(self) -> SpeechModels:
        return self.choice.models

    @property
    def first_language(self) -> FirstLanguage:
        """A live stream's first-language evidence and the rule that settles it early (``first_language.py``)."""
        if self._first is None:
            self._first = FirstLanguage(self.models)
        return self._first

    def step(self, request: StreamRequest) -> StreamStep:
        """One live step as the live routes send it: its PCM (resampled to 16 kHz) through :meth:`step_audio`
        with the request's options; no audio, no decoding."""
        audio = load_pcm16(request.pcm, request.sample_rate)
        if audio.size == 0:
            return StreamStep(language_code=request.language or "", cut_seconds=0.0)
        with self.order.turn(request.final):  # a stream's final before other streams' partial steps
            return self.step_audio(
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

    def step_audio(
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
        """One live step over an in-memory 16 kHz buffer (the module's docstring says what each option does)."""
        given = self.models.route(language) if language else None
        chunks = self.vad(audio, min_silence_ms=self.commit_silence_ms, pad_ms=STREAM_PAD_MS)
        warnings: list[str] = []
        settled = self._language(audio, chunks, given, offset, final, warnings)
        if isinstance(settled, StreamStep):  # unsure: nothing shown, ask again with more speech
            return settled
        route, detection = settled.route, settled.detection
        # a step that settled the language on Whisper's detection of this very speech does not judge it again; one
        # that settled it on weaker evidence (a fluent-looking decode, a short clip), or a partial before it settles,
        # is judged segment by segment
        judged = judge and (language is not None or not settled.confident)
        step = _Step(self.models, self.choice, audio, route, offset, judged, judge)
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
        # a family whose partial is its exact decode (CTC) decodes the tail once, for both: the last step may return it
        exact_partial = route.recognizer.partial_is_exact
        if final and exact_tail is not None and not self._speech_after(audio, exact_tail[1] - offset):
            # decoded exactly, screened and judged by the step before; no speech came after it
            pending_out = list(exact_tail[0])
            pending_text = " ".join(s.text for s in pending_out if s.text)
        else:
            if final:  # nothing was cut: the tail follows what was heard
                pending = step.exact(tail, heard, context_text)
            elif not cut and tail and commit_before is not None and (exact_partial or self._speech_ended(audio)):
                pending = step.exact(tail, heard, context_text, committed=False)
                if pending.verdict is None or pending.verdict.route is not None:  # the last step may return it
                    exact_until = round(offset + audio.size / SAMPLE_RATE, 3)
            else:
                # the step's first-language decode is the partial when it covers the tail alone (nothing cut)
                pending = step.quick(max(cut, context), tail, settled.early if not cut and not context else None)
            pending_out, pending_text = pending.out(), pending.text
        poor = quality_warning(route) if final_segments or pending_out else None
        return StreamStep(
            language_code=route.code,
            language_probability=round(detection.probability, 4) if detection else None,
            language_settled=True,
            cut_seconds=round(cut / SAMPLE_RATE, 3),
            final=final_segments,
            pending=pending_out,
            pending_text=pending_text,
            exact_until=exact_until,
            withheld=step.withheld,
            warnings=warnings + step.warnings + ([poor] if poor else []),
        )

    def _language(
        self,
        audio: np.ndarray,
        chunks: list[Chunk],
        given: Route | None,
        offset: float,
        final: bool,
        warnings: list[str],
    ) -> _Language | StreamStep:
        """The step's language: ``given``; else settled early on unmistakable speech (``first_language``), or by
        the file's rule (``LanguageChoice.decide``) once there are :data:`STREAM_DETECT_SECONDS` of speech or the
        stream ended; else the unsettled step (nothing shown, its decode the ``candidate``)."""
        if given is not None:
            return _Language(given)
        speech = speech_only(audio, chunks) if chunks else np.zeros(0, np.float32)
        if not final and speech.size < STREAM_DETECT_SECONDS * SAMPLE_RATE:
            evidence = self.first_language.evidence(speech)
            if not self.first_language.decides(evidence):
                return StreamStep(
                    language_code="",
                    language_settled=False,
                    cut_seconds=0.0,
                    candidate=_candidate(evidence, chunks, offset),
                )
            detection, route = self._early(evidence)
            return _Language(
                route,
                detection,
                True,
                Heard(_candidate_segments(evidence, chunks, offset), detection, evidence.speech_s),
            )
        decided, route = self.choice.decide(speech, warnings)
        # Whisper's detection on all this speech placed it in a served language: not judged again here
        return _Language(route, decided, decided is not None and decided.served >= self.served_floor)

    def _early(self, evidence: Evidence) -> tuple[Detection, Route]:
        """The detection and route of speech the early rule found unmistakable."""
        assert evidence.code is not None
        detection = Detection(
            evidence.code,
            evidence.probability,
            [(evidence.code, evidence.probability)],
            served=evidence.served,
            heard=evidence.heard,
            signal=f"{self.models.detector.name} + transcript text language id",
        )
        return detection, self.models.routes()[evidence.code]

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

    def _short_pause_chunks(self, audio: np.ndarray) -> list[Chunk]:
        """The VAD's speech chunks of ``audio``, unpadded, a pause of half :data:`STREAM_ENDING_SILENCE_MS`
        ending one: how the end of a stream's speech is found."""
        return self.vad(audio, min_silence_ms=STREAM_ENDING_SILENCE_MS // 2, pad_ms=0)


def _split_at(chunks: list[Chunk], sample: int) -> list[Chunk]:
    """``chunks`` with the one that spans ``sample`` (if any) cut in two there."""
    out: list[Chunk] = []
    for c in chunks:
        if c["start"] < sample < c["end"]:
            out += [{**c, "end": sample}, {**c, "start": sample}]
        else:
            out.append(c)
    return out


def _candidate_segments(evidence: Evidence, chunks: list[Chunk], offset: float) -> list[SpeechSegment]:
    """The first-language decode as the partial of the speech ``chunks`` (one segment, no word times)."""
    if not evidence.text or not chunks:
        return []
    start, end = offset + chunks[0]["start"] / SAMPLE_RATE, offset + chunks[-1]["end"] / SAMPLE_RATE
    return [SpeechSegment(round(start, 3), round(end, 3), evidence.text, [], evidence.logprob)]


def _candidate(evidence: Evidence, chunks: list[Chunk], offset: float) -> list[Segment]:
    """What an unsettled step decoded, for the next step's agreement only (``StreamStep.candidate``)."""
    return [segment(s) for s in _candidate_segments(evidence, chunks, offset)]


def _shift(chunks: list[Chunk], by: int) -> list[Chunk]:
    return [{**c, "start": max(0, c["start"] + by), "end": c["end"] + by} for c in chunks]

"""What the speech pipeline asks of a speech-model family, and what a family hands back.

- :class:`Recognizer`: one family's models in a pipeline (Whisper's, the CTC models'), behind one interface: the
  languages it serves (one :class:`Route` each), a file's speech decoded, a live step's quick (partial) and exact
  (committed) decodes, a cheap look at some speech for auto-detection, the family's own guards and whether its
  transcript reads as text, what ``/api/v1/models`` says of each language it serves (:class:`Served`), and its
  warm-up. Every route carries the recognizer that serves it: routing, language choice, the pipeline and the
  deployment call the recognizer, never a family by name.
- :class:`LanguageDetector`: which language some speech is in (Whisper's spoken-language detector). A family that
  cannot say it (``Recognizer.detects_language`` False) leaves ``Heard.detection`` empty, and the pipeline asks
  the detector (``engines.speech.routing.SpeechModels``): no family calls another.
- :class:`Family`: a family as the family list (``engines.speech.families``) knows it: whether a model a language
  is routed to is one of its models (:class:`Located`), and its recognizer built from them.
- What they hand back: segments and their timed words (:class:`SpeechSegment`, :class:`WordTiming`), a live
  decode with the languages heard in its speech (:class:`Heard`), a detection (:class:`Detection`).

``engines.speech.families`` lists the families, says which one a model directory belongs to and builds their
recognizers; docs/architecture.md ("Adding a speech-model family") says how to add one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from contracts.quality import Quality
from contracts.settings import SpeechSettings

Chunk = dict[str, int]  # a VAD speech chunk, {"start": sample, "end": sample} (engines.speech.vad)


@dataclass(frozen=True)
class Route:
    """How one language is transcribed: by which recognizer, which of its models, told which language token."""

    code: str
    model_key: str  # which of the recognizer's models (Whisper: DEFAULT_MODEL or a configured code; CTC: "ctc:<code>")
    model_ref: str  # the model's name or where it is (a directory, a Hugging Face id)
    # the token the model is told, by which the language detector names the language too (Whisper's "af"); None: the
    # model is told none (a CTC model; a Whisper fine-tune of a language Whisper has no token for), and
    # auto-detection finds the language only by its model's transcript, read by the text language identifier
    language_token: str | None
    recognizer: Recognizer = field(compare=False, repr=False)


@dataclass
class WordTiming:
    word: str  # as the model wrote it, leading space included (joining words rebuilds the text)
    start: float
    end: float
    probability: float
    speaker_id: str | None = None

    @property
    def text(self) -> str:
        return self.word.strip()


@dataclass
class SpeechSegment:
    start: float
    end: float
    text: str
    words: list[WordTiming] = field(default_factory=list)
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0


@dataclass(frozen=True)
class Detection:
    """Auto-detected language. Probabilities are the detector's over every language it knows, never renormalised
    over the served ones: a served language's probability includes its kin (Dutch for Afrikaans)."""

    code: str
    probability: float  # of ``code``
    candidates: list[tuple[str, float]]  # served languages, best first
    served: float = 1.0  # mass of all served languages (1.0 when the language was decided otherwise)
    heard: list[tuple[str, float]] = field(default_factory=list)  # the detector's own top languages (its tokens)
    signal: str = ""  # what decided: the detector (its name), or a family's transcript read by the text language id


@dataclass
class Heard:
    """What a recognizer made of some speech: its segments, and where asked for, the languages heard in that
    speech (``detection``; None when not asked or when nothing can be said)."""

    segments: list[SpeechSegment]
    detection: Detection | None = None
    seconds: float = 0.0  # of speech decoded


@dataclass(frozen=True)
class Served:
    """What the records and ``/api/v1/models`` say of a language a recognizer serves."""

    model: str  # the model's name
    note: str | None  # how it is served, where that needs saying
    quality: Quality  # on real speech: measured here, published, or neither
    licence: str | None  # None: not stated


class LanguageDetector(Protocol):
    """Which served language some speech is in, by a spoken-language detector over every language it knows
    (Whisper's): the likeliest served language and the mass of all served ones, never renormalised."""

    @property
    def name(self) -> str:
        """What the records call the signal of its detections (``Detection.signal``: "whisper")."""
        ...

    @property
    def model_name(self) -> str:
        """What the records and the refusals call the detector's model (the default model)."""
        ...

    def detect(self, speech: np.ndarray) -> Detection | None:
        """The language of up to 30 s of ``speech`` (16 kHz, speech only); None: too little speech, nothing served."""
        ...

    def detect_short(self, speech: np.ndarray) -> Detection | None:
        """:meth:`detect` at a cost that scales with the speech's length: a live segment's language check."""
        ...

    def detection_of(self, heard: list[tuple[str, float]]) -> Detection | None:
        """The served languages' share of the detector's language probabilities ``heard`` (its tokens, best first)."""
        ...

    def first_look(self, speech: np.ndarray) -> tuple[Detection | None, str, float]:
        """A live stream's first look at ``speech`` before its language is known: the detection, and a greedy
        decode in the likeliest served language (its text and mean log-probability per token)."""
        ...

    def detectable(self) -> dict[str, str]:
        """Detector token -> code, for the languages auto-detection may answer (a served language's kin too)."""
        ...

    def language_name(self, token: str) -> str:
        """The English name of one of the detector's language tokens ('sw' -> 'Swahili')."""
        ...


class Recognizer(Protocol):
    """One speech-model family's models in a pipeline. ``audio`` is 16 kHz mono float32 and ``chunks`` its VAD
    speech chunks in samples: only the speech is decoded, times are seconds from ``offset``. ``route`` is one of
    :meth:`routes`."""

    @property
    def family(self) -> str:
        """The family's name: what ``/api/v1/models`` says of its languages, and what the records name as the signal
        that decided a language ("ctc transcript + text language id")."""
        ...

    @property
    def fluent_means_language(self) -> bool:
        """Whether a fluent, confident decode in a language is evidence that the speech is in it (a decoder
        conditioned on the language: Whisper's); False: its transcript is read by the text language identifier."""
        ...

    @property
    def partial_is_exact(self) -> bool:
        """Whether a live partial is the same decode as a committed segment (a CTC model's one forward pass): the
        step that made it may hand it on as the uncommitted speech's exact decode (``StreamStep.exact_until``), so
        a stream that ends with no more speech gets its final without decoding again."""
        ...

    @property
    def detects_language(self) -> bool:
        """Whether its live decodes can say which languages their speech is in (``Heard.detection``) when asked."""
        ...

    @property
    def batching(self) -> bool:
        """Whether concurrent requests' windows are decoded in shared batches (the deployment sizes its threads)."""
        ...

    @property
    def detector(self) -> LanguageDetector | None:
        """The family's language detector, if it has one."""
        ...

    def routes(self) -> dict[str, Route]:
        """Every language code it serves, with how."""
        ...

    def transcribe(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[Chunk],
        *,
        offset: float = 0.0,
        deadline: float | None = None,
    ) -> Iterable[SpeechSegment]:
        """A file's speech: segments with timed words. ``deadline`` (``time.time()``) raises ``TimedOut`` once
        passed."""
        ...

    def quick_segments(
        self, audio: np.ndarray, route: Route, chunks: list[Chunk], *, offset: float = 0.0, detect: bool = False
    ) -> Heard:
        """A live step's partial of the speech ``chunks`` (cheap; word times optional). ``detect``: the languages
        heard in that speech too, where it can say them."""
        ...

    def exact_segments(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[Chunk],
        *,
        offset: float = 0.0,
        heard: list[Chunk] | None = None,
        heard_text: str = "",
        detect: bool = False,
    ) -> Heard:
        """A live step's committed speech ``chunks``, with word times. ``heard``: the speech just before, committed
        already as ``heard_text``, which a family may hear as context (only what follows is returned)."""
        ...

    def quick_transcript(self, speech: np.ndarray, route: Route) -> tuple[str, float]:
        """A cheap look at what ``route``'s model makes of ``speech`` (speech only): its text and mean
        log-probability (-inf when nothing was decoded), for auto-detection."""
        ...

    def screen(self, segments: list[SpeechSegment]) -> tuple[list[SpeechSegment], list[str]]:
        """The family's guards over ``segments``: what passes, and one warning per kind of problem."""
        ...

    def readable(self, text: str, seconds: float, logprob: float) -> bool:
        """Whether a transcript of ``seconds`` of speech is text, not the decoder's failure (a loop, letter soup)."""
        ...

    def language_blind(self, route: Route) -> bool:
        """Whether ``route``'s model transcribes without being told the language: one transcript of some speech
        serves every language routed to it."""
        ...

    def served(self, route: Route) -> Served:
        """What the records and ``/api/v1/models`` say of ``route``'s language."""
        ...

    def backend(self) -> str | None:
        """What runs its models, for ``/api/v1/models`` (None: nothing to say)."""
        ...

    def warm_up(self) -> None:
        """Load what a first request would wait for (a deployment's start)."""
        ...


@dataclass(frozen=True)
class Located:
    """A value of ``speech.language_models``: the language it is routed for and the model it names."""

    code: str
    ref: str  # as the setting gives it: a registered name, a directory, a Hugging Face id
    path: Path | None  # its directory (a registered model's, or the value itself); None: no directory (a hub id)
    source: str  # where it came from: the Hugging Face id, or the directory


@dataclass(frozen=True)
class FamilySettings:
    """What a family builds its recognizer with: the speech settings (its own options among them, as Whisper's
    ``speech.whisper``), and the data directory."""

    speech: SpeechSettings
    data_dir: Path


class Family(Protocol):
    """One speech-model family, as the family list (``engines.speech.families``) asks it."""

    @property
    def name(self) -> str:
        """The family's name (``Recognizer.family``)."""
        ...

    @property
    def accepts(self) -> str:
        """What models it takes, for the refusal of a model no family claims."""
        ...

    def claims(self, model: Located) -> bool:
        """Whether ``model`` is one of its models (told from its files alone, nothing loaded)."""
        ...

    def build(self, routed: list[Located], settings: FamilySettings) -> Recognizer | None:
        """Its recognizer, serving the models ``routed`` to it (and any it serves by default); None: nothing to
        serve."""
        ...

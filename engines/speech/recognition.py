"""What every speech recognizer hands the pipeline: how a language is routed to a model (:class:`Route`), what
auto-detection found (:class:`Detection`), and the segments and timed words it heard (:class:`SpeechSegment`,
:class:`WordTiming`). Whisper (``engines.speech.whisper``) and the CTC models (``engines.speech.ctc``) fill them;
``engines.speech.routing`` sends each route to its family."""

from __future__ import annotations

from dataclasses import dataclass, field

WHISPER = "whisper"
CTC = "ctc"


@dataclass(frozen=True)
class Route:
    """How one language is transcribed: which model of which family, and which Whisper language token to force."""

    code: str
    model_key: str  # DEFAULT_MODEL or the code whose configured model is used
    model_ref: str
    whisper_language: str | None  # None: the model detects (a CTC model, a Whisper fine-tune of a language it lacks)
    family: str = WHISPER  # WHISPER or CTC


@dataclass
class WordTiming:
    word: str  # as Whisper wrote it, leading space included (joining words rebuilds the text)
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
    """Auto-detected language. Probabilities are Whisper's over every language it knows, never renormalised over
    the served ones: a served language's probability includes its kin (Dutch for Afrikaans)."""

    code: str
    probability: float  # of ``code``
    candidates: list[tuple[str, float]]  # served languages, best first
    served: float = 1.0  # mass of all served languages (1.0 when the language was decided otherwise)
    heard: list[tuple[str, float]] = field(default_factory=list)  # Whisper's own top languages (its tokens)
    signal: str = "whisper"  # what decided: Whisper's detector, or a transcript read by the text language identifier


@dataclass
class Heard:
    """What a recognizer made of some speech: its segments, and where asked for, the languages its detector
    hears in that speech (``detection``; None when not asked or when nothing can be said)."""

    segments: list[SpeechSegment]
    detection: Detection | None = None
    seconds: float = 0.0  # of speech decoded

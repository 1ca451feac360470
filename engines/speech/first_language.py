"""A live stream's first language, decided on evidence sized to the speech.

Before a stream's language is known, each step looks at the speech it has (:meth:`FirstLanguage.evidence`): one
unpadded encoding of it gives Whisper's language detection and a greedy decode in the likeliest served language,
and the text language identifier reads that decode. Speech is **unmistakable** (:class:`EarlyRule`) when Whisper's
likeliest language is a served one's own token (not a kin's: Whisper hears German as Afrikaans's kin) at
``detection`` probability or more, the decode reads as fluent text (``min_words`` words or more, no loop or
stutter, a mean token log-probability of ``logprob`` or more) and the text language identifier names the same
language at ``text`` confidence or more: the stream's language is then settled on that step. Anything less waits
for more speech, up to ``STREAM_DETECT_SECONDS`` (``engines.speech.live_step``), where the file's rule decides or
refuses as before. The thresholds come from an ROC on real recordings (``scripts/eval_first_language.py``,
docs/speech.md#live-sessions-without-a-language).

Languages Whisper has no token for (isiZulu routed to a CTC model) are never decided early: their own model's
transcript decides them once the stream has enough speech, as for files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from engines.speech import screening
from engines.speech.audio import SAMPLE_RATE
from engines.speech.language_choice import TextLanguage
from engines.speech.routing import SpeechModels

PUNCTUATION = "\"'.,;:!?()[]-"


@dataclass(frozen=True)
class Evidence:
    """What a live step without a language knows of its speech."""

    speech_s: float = 0.0
    code: str | None = None  # the likeliest served language in Whisper's detection
    own_token: bool = False  # Whisper's likeliest language is that one's own token (not a kin's: German for afr)
    probability: float = 0.0  # its probability
    served: float = 0.0  # the mass of every served language
    heard: list[tuple[str, float]] = field(default_factory=list)  # Whisper's own likeliest tokens
    text: str = ""  # the greedy decode in ``code``
    logprob: float = float("-inf")
    text_language: str | None = None  # the text language identifier's reading of ``text``
    text_confidence: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["logprob"] = max(self.logprob, -99.0)  # JSON has no -inf
        return out

    @classmethod
    def of(cls, data: dict[str, Any]) -> Evidence:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class EarlyRule:
    """When a stream's first language is decided before ``STREAM_DETECT_SECONDS`` of speech."""

    detection: float = 0.8  # Whisper's probability of the served language
    text: float = 0.3  # the text language identifier's confidence in the same language
    logprob: float = -0.8  # the decode's mean log-probability per token
    min_words: int = 3
    min_speech_s: float = 1.0
    own_token: bool = True  # Whisper's likeliest language must be the served one's own token

    def decides(self, evidence: Evidence | dict[str, Any]) -> bool:
        e = evidence if isinstance(evidence, Evidence) else Evidence.of(evidence)
        return (
            e.code is not None
            and (e.own_token or not self.own_token)
            and e.speech_s >= self.min_speech_s
            and e.probability >= self.detection
            and e.text_language == e.code
            and e.text_confidence >= self.text
            and e.logprob >= self.logprob
            and len(e.text.split()) >= self.min_words
            and not screening.repeats(e.text)
            and not stutters(e.text)
        )


def stutters(text: str) -> bool:
    """Whether a word comes three times in a row ("by gay gay gay"): a decoder that has lost the speech, as Whisper
    base does on Afrikaans it hears as English."""
    words = [w.strip(PUNCTUATION).casefold() for w in text.split()]
    return any(words[i] and words[i] == words[i + 1] == words[i + 2] for i in range(len(words) - 2))


class FirstLanguage:
    """The first-language evidence of live steps over one pipeline's speech models, and the rule it is judged by."""

    def __init__(self, models: SpeechModels, rule: EarlyRule | None = None) -> None:
        self.models = models
        self.rule = rule or EarlyRule()

    def evidence(self, speech: np.ndarray) -> Evidence:
        """The evidence of a step's ``speech`` (16 kHz, the VAD's speech only)."""
        seconds = speech.size / SAMPLE_RATE
        if seconds < self.rule.min_speech_s:  # too little to decide on: not decoded
            return Evidence(speech_s=round(seconds, 3))
        detection, text, logprob = self.models.detector.first_look(speech)
        if detection is None:
            return Evidence(speech_s=round(seconds, 3))
        identifier = TextLanguage.get()
        guess = identifier.detect(text) if identifier is not None and text else None
        return Evidence(
            speech_s=round(seconds, 3),
            code=detection.code,
            own_token=bool(detection.heard) and detection.heard[0][0] == self.models.language_token(detection.code),
            probability=round(detection.probability, 4),
            served=round(detection.served, 4),
            heard=detection.heard[:3],
            text=text,
            logprob=round(logprob, 4),
            text_language=guess.language if guess else None,
            text_confidence=round(float(guess.confidence), 4) if guess else 0.0,
        )

    def decides(self, evidence: Evidence) -> bool:
        return self.rule.decides(evidence)

"""Which served language some speech is in, or that none is: the decisions of auto-detection for files and live
streams, and the check of each live segment's language.

The language detector (``SpeechModels.detector``: Whisper's, ``WhisperDetector.detect``) gives the probability
mass of the served languages over every language it knows. :class:`LanguageChoice` turns that into a decision:

- :meth:`~LanguageChoice.decide`: a file's language (or a live stream's, once it has
  ``STREAM_DETECT_SECONDS`` of speech): below ``served_language_floor``, unless a decode in the likeliest
  served language reads as fluent, confident text (:meth:`~LanguageChoice.reads_as`), the audio is in a language
  without a model: refused (:class:`LanguageNotServed`), or with ``unserved_language: warn`` transcribed with a
  warning. Configured languages Whisper has no token for are tried first when the served languages are not
  confident (:meth:`~LanguageChoice.probe_tokenless`).
- :meth:`~LanguageChoice.judge`: one live segment, once the stream has its language: the same test on the
  segment's own speech, so that a call that moves from English into isiZulu gets its isiZulu withheld (or
  warned) instead of written as English, and a segment clearly in another served language is decoded in it.
- :meth:`~LanguageChoice.text_language`: the text language identifier's reading of a transcript (a second
  opinion on an uncertain file detection).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from contracts.errors import LanguageNotServed
from contracts.installs import install_hint
from contracts.languages import CODE_SWITCHED_ZULU
from contracts.languages import speech_name as language_name
from contracts.settings import SpeechSettings
from engines.speech.audio import SAMPLE_RATE
from engines.speech.recognition import Detection, Heard, Route
from engines.speech.routing import SpeechModels
from engines.speech.screening import repeats

log = logging.getLogger(__name__)

LANGID_CONFIDENCE = 0.75  # text-LID confidence needed to overrule an uncertain audio detection
NAMED_DETECTION = 0.8  # Whisper's probability for an unserved language before a refusal names it
SHORT_SPEECH_SECONDS = 6.0  # less speech than this is refused only below a quarter of served_language_floor
VERIFY_LOGPROB = -0.5  # mean token log-probability a decode needs to rescue a low detection (reads_as)
UNCERTAIN_DETECTION = 0.75  # audio detections below this are checked against the text
# A live segment with less speech than this is not judged on its own: it keeps the stream's language.
JUDGE_MIN_SECONDS = 2.0
# A live segment is decoded in another served language than the stream's only when Whisper gives that language
# at least this probability on the segment's speech.
SWITCH_PROBABILITY = 0.8


class TextLanguage:
    """The text language identifier (engines.text.langid), loaded once per process on first use; None if absent."""

    _instance: Any = None
    _failed = False
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> Any:
        if cls._instance is None and not cls._failed:
            with cls._lock:
                if cls._instance is None and not cls._failed:
                    try:
                        from engines.text.langid import LanguageIdentifier

                        cls._instance = LanguageIdentifier()
                    except Exception as exc:  # noqa: BLE001 - optional: detection works without it
                        log.warning("text language identifier unavailable: %s", exc)
                        cls._failed = True
        return cls._instance


@dataclass(frozen=True)
class Verdict:
    """What :meth:`LanguageChoice.judge` found of a live segment: the served language to write it in, or
    ``route`` None with the reason it is not served (``message``: the notice of a withheld segment, or the
    warning a segment carries under ``unserved_language: warn``, which keeps ``route``)."""

    route: Route | None
    message: str = ""
    likely: str | None = None  # the language it is most likely in, where one can be named


class LanguageChoice:
    """The language decisions of one pipeline: its speech models and ``transcription`` thresholds."""

    def __init__(self, models: Callable[[], SpeechModels], speech: SpeechSettings) -> None:
        self._models = models
        self.unserved_language = speech.unserved_language
        self.floor = speech.served_language_floor
        self.confident = speech.served_language_confident

    @property
    def models(self) -> SpeechModels:
        return self._models()

    def tokenless(self, routes: dict[str, Route]) -> list[str]:
        """Configured languages without a language token the detector names (found by their own model's
        transcript)."""
        return [c for c, r in routes.items() if r.language_token is None and c != CODE_SWITCHED_ZULU]

    # ------------------------------------------------------------------ a file's (or a stream's) language

    def decide(self, speech: np.ndarray, warnings: list[str]) -> tuple[Detection | None, Route]:
        """The served language of ``speech``, or :class:`LanguageNotServed` (see the module docstring)."""
        models = self.models
        detection = models.detector.detect(speech)
        routes = models.routes()
        tokenless = self.tokenless(routes)
        low = detection is None or detection.served < self.floor
        # a decode in the likeliest served language that reads as fluent text keeps the audio with Whisper: a model
        # of a language Whisper lacks is asked only about audio Whisper can neither place nor read
        fluent_served = low and detection is not None and self.reads_as(speech, routes[detection.code])
        if tokenless and low and not fluent_served:
            guess = self.probe_tokenless(speech, tokenless, routes)
            if guess is not None:
                return self.probed(*guess, routes[guess[0]]), routes[guess[0]]
        if detection is None:
            warnings.append("The language could not be detected; English was assumed.")
            return None, routes["eng"]
        unserved = low and not fluent_served
        # a few seconds are too little for Whisper base to tell languages apart (docs/speech.md, language
        # detection). Short audio is refused only on very low scores, else it is transcribed with the warning below
        short = speech.size < SHORT_SPEECH_SECONDS * SAMPLE_RATE and detection.served >= self.floor / 4
        if unserved and not short:
            message = self.not_served_message(detection, tokenless)
            if self.unserved_language == "refuse":
                raise LanguageNotServed(message)
            warnings.append(
                f"{message} It was transcribed as {language_name(detection.code)} anyway "
                "(KHULUMA_SPEECH_UNSERVED_LANGUAGE=warn): the transcript is unreliable."
            )
        elif detection.served < self.confident:
            warnings.append(
                f"Language detection was uncertain: the languages served here score {detection.served:.0%} together "
                f"in Whisper's language detection, so the audio may be in a language without a speech model (such as "
                f"isiZulu, isiXhosa, Setswana or Sepedi); it was transcribed as {language_name(detection.code)}, and "
                f"the transcript may be wrong. Send lang_code when you know the language."
            )
        return detection, routes[detection.code]

    def reads_as(self, speech: np.ndarray, route: Route) -> bool:
        """Whether ``route``'s language decodes ``speech`` into fluent, confident text (a second opinion on audio
        Whisper's detector barely places in a served language: real accented English can score 0.15, while real
        isiZulu forced into a served language decodes into a loop or text below -0.9 log-probability per token)."""
        text, logprob = route.recognizer.quick_transcript(speech, route)
        return fluent(text, logprob)

    def not_served_message(self, detection: Detection, tokenless: list[str] | None = None) -> str:
        models = self.models
        tokenless = self.tokenless(models.routes()) if tokenless is None else tokenless
        served = ", ".join(sorted(c for c in models.routes() if c != CODE_SWITCHED_ZULU))
        likely = self.likely(detection)
        what = (
            f"{models.detector.language_name(likely)} (Whisper's '{likely}')"
            if likely
            else "a language without a speech model here"
        )
        heard = ", ".join(f"{t} {p:.2f}" for t, p in detection.heard[:3])
        lacking = "" if tokenless else f" {models.model_name} knows no isiZulu, isiXhosa, Sesotho, Setswana or Sepedi."
        return (
            f"The audio is most likely in {what}: the languages served here ({served}) score "
            f"{detection.served:.1%} together in Whisper's language detection (its likeliest: {heard}).{lacking} "
            f"No transcript is returned rather than a wrong one. An operator can add a speech model for the language: "
            f"{install_hint('speech')} (any code); a caller who knows the audio is in a served language can send its "
            f"lang_code."
        )

    def likely(self, detection: Detection) -> str | None:
        """Whisper's own token for the unserved language it clearly hears (``NAMED_DETECTION``), else None."""
        top, top_p = detection.heard[0] if detection.heard else ("", 0.0)
        return top if top_p >= NAMED_DETECTION and top not in self.models.detector.detectable() else None

    def probe_tokenless(
        self, speech: np.ndarray, tokenless: list[str], routes: dict[str, Route]
    ) -> tuple[str, float] | None:
        """A configured language Whisper has no token for, when its own model's greedy transcript of the first
        30 s reads as that language to the text language identifier (a language-agnostic CTC model's one
        transcript serves all the languages routed to it)."""
        identifier = TextLanguage.get()
        if identifier is None:
            return None
        read: dict[str, tuple[str, float]] = {}
        for code in tokenless:
            route = routes[code]
            key = route.model_ref if route.recognizer.language_blind(route) else f"{route.model_ref}:{code}"
            if key not in read:
                read[key] = route.recognizer.quick_transcript(speech, route)
            text, logprob = read[key]
            if len(text.split()) < 3 or not route.recognizer.readable(text, speech.size / SAMPLE_RATE, logprob):
                continue
            guess = identifier.detect(text)
            if guess.language == code and guess.confidence >= 0.5:
                return code, float(guess.confidence)
        return None

    @staticmethod
    def probed(code: str, confidence: float, route: Route) -> Detection:
        """The detection of a language found by :meth:`probe_tokenless`, saying which signal decided (the family
        whose transcript was read)."""
        signal = f"{route.recognizer.family} transcript + text language id"
        return Detection(code, confidence, [(code, confidence)], signal=signal)

    def text_language(self, text: str) -> tuple[str, float] | None:
        """The text language identifier's language of ``text`` and its confidence (None when it is absent)."""
        identifier = TextLanguage.get()
        if identifier is None:
            return None
        guess = identifier.detect(text)
        return guess.language, float(guess.confidence)

    # ------------------------------------------------------------------ a live segment's language

    def judge(self, heard: Heard, route: Route, speech: np.ndarray | None = None) -> Verdict:
        """The language of one live segment of a stream in ``route``'s language: ``heard`` is its decode in that
        language with Whisper's detection on its speech. Too little speech to judge (``JUDGE_MIN_SECONDS``): the
        stream's language. Served (mass at or above ``served_language_floor``, or a decode conditioned on the
        language, ``Recognizer.fluent_means_language``, that reads as fluent text): the stream's language, or
        another served language Whisper gives at least ``SWITCH_PROBABILITY``. Not served: a configured language
        Whisper has no token for, when its model's transcript reads as it to the text language identifier (the
        segment's own transcript where its model is not conditioned on the language, as a CTC model's, else
        :meth:`probe_tokenless` on ``speech``); else withheld, or under ``unserved_language: warn`` kept with a
        warning."""
        detection = heard.detection
        if detection is None or heard.seconds < JUDGE_MIN_SECONDS:
            return Verdict(route)
        routes = self.models.routes()
        text = " ".join(s.text for s in heard.segments).strip()
        logprob = float(np.mean([s.avg_logprob for s in heard.segments])) if heard.segments else float("-inf")
        # a decode conditioned on the language (Whisper's) that reads as fluent text rescues a low detection; any
        # other transcript (a CTC model's) is judged by the language the text language identifier reads in it
        conditioned = route.recognizer.fluent_means_language
        if detection.served >= self.floor or (conditioned and fluent(text, logprob)):
            clear = detection.code != route.code and detection.probability >= SWITCH_PROBABILITY
            return Verdict(routes.get(detection.code, route) if clear else route)
        tokenless = self.tokenless(routes)
        if not conditioned and len(text.split()) >= 3 and route.recognizer.readable(text, heard.seconds, logprob):
            # the segment's own transcript is what the probe would read: a routed language it names is it
            read = self.text_language(text)
            if read is not None and read[1] >= 0.5 and read[0] in tokenless:
                return Verdict(routes[read[0]])
        elif tokenless and speech is not None:
            guess = self.probe_tokenless(speech, tokenless, routes)
            if guess is not None:
                return Verdict(routes[guess[0]])
        likely = self.likely(detection)
        message = self.not_served_message(detection, tokenless)
        if self.unserved_language == "refuse":
            return Verdict(None, message, likely)
        return Verdict(
            route,
            f"{message} It was transcribed as {language_name(route.code)} anyway "
            "(KHULUMA_SPEECH_UNSERVED_LANGUAGE=warn): this segment is unreliable.",
            likely,
        )


def fluent(text: str, logprob: float) -> bool:
    """Whether a decode reads as fluent, confident text: three words or more, no loop, a mean token
    log-probability of at least ``VERIFY_LOGPROB``."""
    return len(text.split()) >= 3 and not repeats(text) and logprob >= VERIFY_LOGPROB

"""Whisper's spoken-language detector: the pipeline's :class:`~engines.speech.recognition.LanguageDetector`.

Auto-detection (:meth:`WhisperDetector.detect`) runs Whisper's language detection on up to 30 s of speech over
every language Whisper knows, and reports the likeliest served language with the probability mass of all served
ones, never renormalised: audio in a language without a model (isiZulu, isiXhosa, Setswana...) leaves little mass
on the served languages, and ``engines.speech.language_choice`` refuses it instead of answering a confident wrong
language. Configured languages without a Whisper token (zul, sot) are recognised by their own model's transcript,
checked by the text language identifier, in ``engines.speech.language_choice``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engines.speech.recognition import Detection, Route
from engines.speech.whisper import adapter as fw
from engines.speech.whisper.languages import DEFAULT_MODEL, detectable_of, whisper_language_name
from engines.speech.whisper.models import WhisperModels

SAMPLE_RATE = 16_000
# a live partial (and a first look) of up to this much speech is encoded unpadded; longer, padded
QUICK_MAX_SECONDS = 8.0
QUICK_TOKENS_PER_SECOND = 6.0  # a partial's decode stops after about this many tokens per second of speech


class WhisperDetector:
    """Whisper's language detection over ``models``' default model, for the languages of ``routes``."""

    name = "whisper"

    def __init__(self, models: WhisperModels, routes: Callable[[], dict[str, Route]]) -> None:
        self.models = models
        self.routes = routes

    @property
    def model_name(self) -> str:
        return self.models.default_name

    def detectable(self) -> dict[str, str]:
        """Whisper token -> code, for the languages auto-detection may answer (a served language's kin too)."""
        return detectable_of(self.routes())

    def language_name(self, token: str) -> str:
        return whisper_language_name(token)

    def detect(self, speech: np.ndarray) -> Detection | None:
        """Language of ``speech`` (16 kHz, speech only) by Whisper's detector over every language it knows: the
        likeliest served language and the mass of all served ones (low when the audio is in a language without a
        model: real isiZulu scores 0.02 to 0.06). None: too little speech, no multilingual model, nothing served."""
        if speech.size < SAMPLE_RATE // 4:
            return None
        model = self.models.model(DEFAULT_MODEL)
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
        served = min(1.0, sum(scores.values()))
        return Detection(ranked[0][0], ranked[0][1], ranked, served=served, heard=top, signal=self.name)

    def detect_short(self, speech: np.ndarray) -> Detection | None:
        """:meth:`detect` on a short window (the speech and 5 s of silence, up to 30 s) instead of a padded 30 s
        one: a live segment's language check, at a cost that scales with its length."""
        model = self.models.live_model(DEFAULT_MODEL)
        if speech.size < SAMPLE_RATE // 4 or not fw.is_multilingual(model):
            return None
        return self.detection_of(fw.short_window_languages(model, speech[: 30 * SAMPLE_RATE]))

    def first_look(self, speech: np.ndarray) -> tuple[Detection | None, str, float]:
        """A live stream's first look at ``speech`` (at most :data:`QUICK_MAX_SECONDS`, packed) before its language
        is known: one unpadded encoding on the live instance gives Whisper's detection and a greedy decode in the
        likeliest served language (its text and mean log-probability per token). None and "" when there is too
        little speech, no multilingual model or no served language Whisper can name."""
        model = self.models.live_model(DEFAULT_MODEL)
        if speech.size < SAMPLE_RATE // 4 or not fw.is_multilingual(model):
            return None, "", float("-inf")
        speech = speech[: int(QUICK_MAX_SECONDS * SAMPLE_RATE)]
        tokens = {code: route.language_token for code, route in self.routes().items() if route.language_token}
        found: list[Detection | None] = [None]

        def likeliest(heard: fw.Languages) -> str:
            found[0] = self.detection_of(heard)
            return tokens[found[0].code] if found[0] is not None else heard[0][0]

        decoded = fw.decode_unpadded(
            model, speech, likeliest, max_tokens=int(8 + QUICK_TOKENS_PER_SECOND * speech.size / SAMPLE_RATE)
        )
        if found[0] is None:
            return None, "", float("-inf")
        return found[0], decoded.text, decoded.avg_logprob

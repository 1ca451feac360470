"""The CTC models of a pipeline, by language, as one :class:`~engines.speech.recognition.Recognizer`
(:class:`CTCModels`): each language routed to a CTC model directory (``engines.speech.ctc.recognizer``), a
directory shared by several languages (an MMS model with adapters, Omnilingual) loaded once.

A CTC model decodes a live partial and a committed segment alike (one forward pass over the speech: no beam, no
prefix) and cannot say which language it heard: the pipeline asks the language detector (``detects_language``).
Its transcript is not evidence of the language it was asked for (a CTC model writes letters, not a language's
words: ``fluent_means_language``), so auto-detection reads it with the text language identifier. Its segments are
screened by its own letter-soup guards (``engines.speech.ctc.guards``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from contracts.languages import CODE_SWITCHED_ZULU
from contracts.quality import UNMEASURED, Quality, published
from engines.models.catalogue import catalogued
from engines.speech.ctc import guards
from engines.speech.ctc.recognizer import CTCRecognizer
from engines.speech.recognition import Chunk, Heard, LanguageDetector, Route, Served, SpeechSegment

SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class CTCModel:
    """A CTC model a language is routed to: the recognizer, and what the catalogue knows of it."""

    recognizer: CTCRecognizer
    source: str  # the Hugging Face id or directory it came from
    licence: str | None = None  # None: not stated (a local directory outside the catalogue)
    published: str = ""  # its publisher's figures, as the catalogue words them


class CTCModels:
    """The CTC models by language (``models``: code -> model); code-switched isiZulu runs on the isiZulu model when
    no model is routed to it."""

    family = "ctc"
    fluent_means_language = False
    partial_is_exact = True  # one forward pass, whether the speech is committed or not
    detects_language = False
    batching = False
    detector: LanguageDetector | None = None

    def __init__(self, models: dict[str, CTCModel]) -> None:
        self.models = dict(models)

    def routes(self) -> dict[str, Route]:
        out = {code: Route(code, f"ctc:{code}", m.recognizer.name, None, self) for code, m in self.models.items()}
        if CODE_SWITCHED_ZULU not in self.models and "zul" in self.models:
            out[CODE_SWITCHED_ZULU] = Route(
                CODE_SWITCHED_ZULU, "ctc:zul", self.models["zul"].recognizer.name, None, self
            )
        return out

    def model_of(self, route: Route) -> CTCModel:
        return self.models[route.code if route.code in self.models else "zul"]

    # ------------------------------------------------------------------ decoding

    def transcribe(
        self,
        audio: np.ndarray,
        route: Route,
        chunks: list[Chunk],
        *,
        offset: float = 0.0,
        deadline: float | None = None,
        reuse: bool = False,
    ) -> Iterator[SpeechSegment]:
        recognizer = self.model_of(route).recognizer
        yield from recognizer.transcribe(
            audio, chunks, language=_model_language(recognizer, route), offset=offset, deadline=deadline, reuse=reuse
        )

    def quick_segments(
        self, audio: np.ndarray, route: Route, chunks: list[Chunk], *, offset: float = 0.0, detect: bool = False
    ) -> Heard:
        """The same pass as a committed segment's."""
        return self._heard(audio, route, chunks, offset)

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
        """One forward pass over the speech (what was heard before is not needed: CTC has no prefix)."""
        return self._heard(audio, route, chunks, offset)

    def _heard(self, audio: np.ndarray, route: Route, chunks: list[Chunk], offset: float) -> Heard:
        if not chunks:
            return Heard([])
        seconds = sum(audio[c["start"] : c["end"]].size for c in chunks) / SAMPLE_RATE
        # a live step: its audio repeats the step before's, whose pass is reused
        return Heard(list(self.transcribe(audio, route, chunks, offset=offset, reuse=True)), None, seconds)

    def quick_transcript(self, speech: np.ndarray, route: Route) -> tuple[str, float]:
        recognizer = self.model_of(route).recognizer
        return recognizer.quick_transcript(speech, language=_model_language(recognizer, route))

    # ------------------------------------------------------------------ guards

    def screen(self, segments: list[SpeechSegment]) -> tuple[list[SpeechSegment], list[str]]:
        return guards.screen(segments)

    def readable(self, text: str, seconds: float, logprob: float) -> bool:
        """Whether ``text`` is not letter soup (a CTC model cannot loop: its transcript of a repeated phrase is the
        phrase repeated)."""
        return guards.soup_reason(text, seconds, logprob) is None

    def language_blind(self, route: Route) -> bool:
        return self.model_of(route).recognizer.agnostic

    # ------------------------------------------------------------------ what it serves

    def served(self, route: Route) -> Served:
        model = self.model_of(route)
        where = f"A CTC model ({model.recognizer.runtime}) from {model.source}."
        if route.code == CODE_SWITCHED_ZULU and route.model_key == "ctc:zul":
            where += " Runs on the isiZulu model."
        licence = model.licence or "not stated (a local directory: see its model card)"
        return Served(route.model_ref, where, self._quality(route, model), licence)

    @staticmethod
    def _quality(route: Route, model: CTCModel) -> Quality:
        """The publisher's figure where the catalogue knows one; else unmeasured, said plainly."""
        known = catalogued(model.source)
        figure = known.published_figure("zul" if route.code == CODE_SWITCHED_ZULU else route.code) if known else None
        if known is not None and (figure is not None or known.published):
            return published(known.published_metric, figure, f"{known.hf_id}: {known.published}")
        return UNMEASURED

    def backend(self) -> str:
        return f"CTC ({', '.join(sorted({m.recognizer.runtime for m in self.models.values()}))})"

    def warm_up(self) -> None:
        """Load every model now, so that no request waits for one."""
        for model in {id(m): m for m in self.models.values()}.values():
            model.recognizer.load()


def _model_language(recognizer: CTCRecognizer, route: Route) -> str | None:
    """The language a CTC model is asked for: none for a language-agnostic one (Omnilingual), the route's code for
    an adapter model or a fine-tune (code-switched isiZulu runs on isiZulu)."""
    if recognizer.agnostic:
        return None
    return "zul" if route.code == CODE_SWITCHED_ZULU else route.code

"""One CTC model directory: Meta's Omnilingual ASR CTC (sherpa-onnx's int8 ONNX export), MMS with per-language
adapters and single-language wav2vec2 / w2v-BERT 2.0 fine-tunes (Hugging Face checkpoints). They hear the languages
Whisper has no token for (isiZulu, isiXhosa, Sepedi, Setswana, Xitsonga ...). The pipeline reaches them through the
CTC family's recognizer (``engines.speech.ctc.models.CTCModels``), which routes each language to one of these.

Its interface, the same for every runtime::

    recognizer = CTCRecognizer("/models/omnilingual-300m", cpu_threads=2)  # runtime told from the files
    recognizer.languages  # frozenset of codes, or None: any language (Omnilingual; an unrouted fine-tune)
    recognizer.agnostic  # True: `language` may be None and the transcript is language-agnostic
    segments = recognizer.transcribe(audio, chunks, language="zul", offset=0.0)  # list[SpeechSegment]
    text, logprob = recognizer.quick_transcript(speech)  # cheap look for auto-detection (text language ID)
    kept, warnings = ctc_guards.screen(segments)  # letter-soup guards (engines/speech/ctc/guards.py)

``audio`` is 16 kHz mono float32 and ``chunks`` its VAD speech chunks in samples (``engines.speech.vad``, as
``WhisperRecognizer.transcribe`` takes them). Only the speech is decoded: chunks are split where longer than
``max_seconds`` (at their quietest 20 ms) and packed into pieces of at most ``max_seconds`` with 0.2 s of silence
between them (:mod:`engines.speech.ctc.decoding`); each piece is one forward pass. One segment per speech chunk,
its words timed by the CTC alignment and mapped back to the audio, each with a probability; the segment's
``avg_logprob`` is the mean log-probability of its letters. ``no_speech_prob`` is 0: CTC has no such estimate.

Models load lazily on first use, once, from local files only (never downloaded);
:func:`engines.models.ctc_layout.inspect` checks the directory at construction, so a missing or malformed one
raises :class:`Unavailable` at once, naming what the directory must hold. Thread-safe: concurrent calls run side
by side (an MMS model's calls in different languages take turns, ``ctc.runtimes.AdapterGate``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np

from contracts.errors import TimedOut, UnsupportedLanguage
from contracts.languages import CODE_SWITCHED_ZULU, transcription_code
from engines.models.ctc_layout import SHERPA_ONNX, Layout, inspect
from engines.speech.ctc import decoding as ctc
from engines.speech.ctc.reuse import PassReuse
from engines.speech.ctc.runtimes import OnnxCTC, Runtime, TransformersCTC
from engines.speech.recognition import SpeechSegment

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
MAX_SECONDS = 30.0  # one forward pass at most: Omnilingual's CTC models take up to 40 s, MMS was trained on less
QUICK_SECONDS = 30.0  # what quick_transcript looks at


class CTCRecognizer:
    """One CTC model directory (any runtime); see the module's docstring for the interface."""

    def __init__(
        self,
        path: str | Path,
        *,
        runtime: str | None = None,  # sherpa-onnx | transformers; None: told from the directory's files
        cpu_threads: int = 0,  # threads per forward pass; 0: every core
        language: str | None = None,  # the language a single-language fine-tune is routed for
        max_seconds: float = MAX_SECONDS,
        name: str | None = None,  # what records and /api/v1/models call it (default: the directory's name)
        device: str = "cpu",  # cpu | cuda (onnxruntime-gpu's CUDA provider, or PyTorch on CUDA); no GPU: Unavailable
    ) -> None:
        self.layout: Layout = inspect(path, runtime)
        self.path = self.layout.path
        self.runtime = self.layout.runtime
        self.name = name or self.path.name
        self.language = transcription_code(language) if language else None
        self.cpu_threads = cpu_threads or (os.cpu_count() or 1)
        self.max_samples = max(ctc.MIN_PIECE_SAMPLES, int(max_seconds * SAMPLE_RATE))
        self.device = device
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()
        self.passes = PassReuse()  # live steps' last passes

    # ------------------------------------------------------------------ what it serves

    @property
    def agnostic(self) -> bool:
        """Whether the model transcribes without being told the language (Omnilingual CTC): its transcript of unknown
        audio is what auto-detection gives the text language identifier."""
        return self.layout.agnostic

    @property
    def languages(self) -> frozenset[str] | None:
        """The codes it serves: an MMS model's adapters, a fine-tune's one language (when given); None: any language
        it is routed for (Omnilingual, or a fine-tune constructed without ``language``)."""
        if self.layout.adapters:
            return frozenset(self.layout.adapters)
        if self.language and not self.agnostic:
            return frozenset({self.language})
        return None

    def serves(self, language: str) -> bool:
        languages = self.languages
        return languages is None or self._model_language(transcription_code(language)) in languages

    def describe(self) -> dict[str, object]:
        """What ``/api/v1/models`` may show of it."""
        languages = self.languages
        return {
            "name": self.name,
            "family": "ctc",
            "runtime": self.runtime,
            "path": str(self.path),
            "languages": sorted(languages) if languages is not None else None,
            "language_agnostic": self.agnostic,
            "loaded": self._runtime is not None,
        }

    # ------------------------------------------------------------------ model

    def load(self) -> None:
        """Load the model now (a deployment's warm-up); later calls are free."""
        self._model()

    def _model(self) -> Runtime:
        runtime = self._runtime
        if runtime is None:
            with self._lock:
                if self._runtime is None:
                    started = time.perf_counter()
                    if self.runtime == SHERPA_ONNX:
                        self._runtime = OnnxCTC(self.layout, self.cpu_threads, self.device)
                    else:
                        self._runtime = TransformersCTC(self.layout, self.cpu_threads, self.language, self.device)
                    took = time.perf_counter() - started
                    log.info("CTC model %s (%s) ready in %.1f s", self.name, self.runtime, took)
                runtime = self._runtime
        return runtime

    def _model_language(self, code: str) -> str:
        """The model's own code for a service code: code-switched isiZulu runs on the isiZulu adapter."""
        if code == CODE_SWITCHED_ZULU and self.layout.adapters and "zul" in self.layout.adapters:
            return "zul"
        return code

    def _check(self, language: str | None) -> str | None:
        """The model's language for a request (None: the model needs none), or :class:`UnsupportedLanguage`."""
        code = self._model_language(transcription_code(language)) if language else None
        languages = self.languages
        if self.layout.adapters:
            if code is None:
                raise UnsupportedLanguage(
                    "und",
                    f"must be given: the speech model {self.name} has one adapter per language "
                    f"({', '.join(self.layout.adapters)}) and detects none.",
                )
            if code not in self.layout.adapters:
                adapters = ", ".join(self.layout.adapters)
                raise UnsupportedLanguage(
                    code, f"has no adapter in the speech model {self.name} (adapters: {adapters})."
                )
            return code
        if code is not None and languages is not None and code not in languages:
            raise UnsupportedLanguage(
                code, f"is not the language of the speech model {self.name} ({', '.join(sorted(languages))})."
            )
        return code

    # ------------------------------------------------------------------ transcription

    def transcribe(
        self,
        audio: np.ndarray,
        chunks: list[dict[str, int]],
        *,
        language: str | None = None,
        offset: float = 0.0,
        deadline: float | None = None,
        reuse: bool = False,
    ) -> list[SpeechSegment]:
        """Segments of the speech ``chunks`` of ``audio`` (16 kHz float32, chunks in samples), times in seconds from
        ``offset``: one per chunk that has words, each word with its CTC-aligned start and end and its probability.
        ``deadline`` (``time.time()``) raises :class:`TimedOut` between pieces once passed. ``reuse``: a live
        step's, whose audio repeats the step before's: only what is new is passed through the model
        (:mod:`engines.speech.ctc.reuse`)."""
        code = self._check(language)
        if not chunks:
            return []
        runtime = self._model()
        vocabulary = runtime.vocabulary(code)
        segments: list[SpeechSegment] = []
        for piece in ctc.pieces(np.asarray(audio, dtype=np.float32), chunks, self.max_samples):
            if deadline is not None and time.time() > deadline:
                raise TimedOut("Transcription took longer than the time limit.")
            if reuse:
                frames = self.passes.frames(
                    piece.audio, code or "", functools.partial(runtime.log_probs, language=code)
                )
                emissions, stride = ctc.path_of(frames.best, frames.posterior, vocabulary.blank), frames.stride
            else:
                log_probs = runtime.log_probs(piece.audio, code)
                stride = ctc.frame_samples(piece.audio.size, log_probs.shape[0])
                emissions = ctc.greedy_path(log_probs, vocabulary.blank)
            segments += ctc.segments_of(emissions, vocabulary, piece, stride, offset)
        return segments

    def quick_transcript(self, speech: np.ndarray, *, language: str | None = None) -> tuple[str, float]:
        """The greedy transcript of up to :data:`QUICK_SECONDS` of ``speech`` (speech only, 16 kHz) in one forward
        pass, and its mean log-probability per letter (-inf when nothing was heard). With ``language`` None an
        Omnilingual model's transcript is language-agnostic: what auto-detection hands the text language
        identifier. An MMS model needs the language (it transcribes through that language's adapter)."""
        code = self._check(language)
        runtime = self._model()
        vocabulary = runtime.vocabulary(code)
        window = np.asarray(speech[: int(QUICK_SECONDS * SAMPLE_RATE)], dtype=np.float32)
        piece = ctc.pack(window, [(0, window.size)] if window.size else [])
        emissions = ctc.greedy_path(runtime.log_probs(piece.audio, code), vocabulary.blank)
        return ctc.text_of(emissions, vocabulary), ctc.mean_logprob(emissions, vocabulary)

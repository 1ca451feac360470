"""The CTC runtimes: audio in, per-frame log-probabilities out (:mod:`engines.speech.ctc.decoding` does the rest).

- :class:`OnnxCTC` runs sherpa-onnx's export of Meta's Omnilingual ASR CTC models (``model.int8.onnx`` +
  ``tokens.txt``) with onnxruntime, exactly as sherpa-onnx feeds it: the piece's waveform normalised to zero mean
  and unit variance (``OfflineOmnilingualAsrCtcModel::NormalizeFeatures``, epsilon 1e-5), one utterance per call,
  blank id 0. sherpa-onnx's own ``OfflineRecognizer`` runs the same graph on the same onnxruntime, but its CTC result
  holds only token start times: no probabilities and no token ends, which word confidences, word end times and the
  guards need. ``tests/unit/test_speech_ctc.py`` checks that both give the same transcript on the same audio.
- :class:`TransformersCTC` runs a Hugging Face ``*ForCTC`` checkpoint with PyTorch: MMS (``Wav2Vec2ForCTC`` with
  per-language adapters, switched with ``load_adapter(lang)``) or a single-language fine-tune (wav2vec2, w2v-BERT 2.0
  through ``AutoModelForCTC`` and ``AutoFeatureExtractor``).

Every runtime loads from local files only (nothing is downloaded) and is safe for concurrent calls: onnxruntime
sessions and PyTorch modules in eval mode run calls side by side; an MMS model has one adapter in place at a
time, so calls in different languages take turns (:class:`AdapterGate`) while calls in one language run together.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from contracts.errors import Unavailable, UnsupportedLanguage
from engines.models.ctc_layout import LAYOUT_HELP, TOKENS, Layout
from engines.speech.ctc.decoding import Vocabulary, log_softmax

log = logging.getLogger(__name__)

NORMALISE_EPS = 1e-5  # sherpa-onnx's and Hugging Face's Wav2Vec2FeatureExtractor's variance floor


class Runtime(Protocol):
    """What a CTC runtime offers the recognizer."""

    languages: frozenset[str] | None  # None: any language (language-agnostic, or what it is routed for)

    def log_probs(self, audio: np.ndarray, language: str | None) -> np.ndarray:
        """``(frames, vocabulary)`` log-probabilities of one piece of 16 kHz audio."""
        ...

    def vocabulary(self, language: str | None) -> Vocabulary: ...


def normalise(audio: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance (what wav2vec2-family models were trained on)."""
    audio = np.asarray(audio, dtype=np.float32)
    return ((audio - audio.mean()) / np.sqrt(audio.var() + NORMALISE_EPS)).astype(np.float32)


def read_tokens(path: Path) -> list[str]:
    """``tokens.txt`` as sherpa-onnx reads it: ``<token> <id>`` per line, a line with only an id is the space."""
    found: dict[int, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unavailable(f"{path} cannot be read ({exc}). {LAYOUT_HELP}") from None
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) == 1:
                found[int(fields[0])] = " "
            elif len(fields) == 2:
                found[int(fields[1])] = fields[0]
            else:
                raise ValueError(line)
        except ValueError:
            raise Unavailable(f"{path} line {number} is not '<token> <id>': {line[:60]!r}. {LAYOUT_HELP}") from None
    if not found or sorted(found) != list(range(len(found))):
        raise Unavailable(f"{path} must number its tokens 0..N-1 without gaps. {LAYOUT_HELP}")
    return [found[i] for i in range(len(found))]


class OnnxCTC:
    """An Omnilingual-style CTC ONNX model (sherpa-onnx's layout) on onnxruntime."""

    languages: frozenset[str] | None = None  # language-agnostic

    def __init__(self, layout: Layout, threads: int, device: str = "cpu") -> None:
        import onnxruntime

        assert layout.model_file is not None
        providers = ["CPUExecutionProvider"]
        if device == "cuda":
            if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
                raise Unavailable(
                    "A CTC model was asked to run on the GPU, but this onnxruntime has no CUDA provider "
                    "(install onnxruntime-gpu, or run it on the CPU)."
                )
            providers.insert(0, "CUDAExecutionProvider")
        tokens = read_tokens(layout.path / TOKENS)
        blank = next((tokens.index(b) for b in ("<blk>", "<blank>", "<eps>") if b in tokens), 0)  # sherpa-onnx's rule
        self._vocabulary = Vocabulary.of(tokens, blank)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # waiting threads sleep instead of spinning, as the service's other engines wait (OMP_WAIT_POLICY=passive):
        # replicas share the cores
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = onnxruntime.InferenceSession(
                str(layout.model_file), sess_options=options, providers=providers
            )
        except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: say what the directory must hold
            raise Unavailable(f"{layout.model_file} is not a loadable ONNX model ({exc}). {LAYOUT_HELP}") from None
        inputs, outputs = self._session.get_inputs(), self._session.get_outputs()
        shape = outputs[0].shape if outputs else []
        if len(inputs) != 1 or len(shape) != 3:
            raise Unavailable(
                f"{layout.model_file} must take one input, the waveform (N, samples), and return CTC logits (N, "
                f"frames, vocabulary) as sherpa-onnx's Omnilingual export does. {LAYOUT_HELP}"
            )
        if isinstance(shape[2], int) and shape[2] != len(tokens):
            raise Unavailable(
                f"{layout.model_file} scores {shape[2]} tokens but {layout.path / TOKENS} lists {len(tokens)}: they "
                f"are not of the same model."
            )
        self._input = inputs[0].name

    def vocabulary(self, language: str | None) -> Vocabulary:
        return self._vocabulary

    def log_probs(self, audio: np.ndarray, language: str | None) -> np.ndarray:
        (logits,) = self._session.run(None, {self._input: normalise(audio)[None]})[:1]
        return log_softmax(logits[0])


class AdapterGate:
    """One adapter in place at a time: calls in the active language run together; a call in another language waits
    until they finish, then switches (``switch(lang)``). First come, first served across languages, so a steady flow
    in one language cannot starve another: a call never overtakes a waiting call of another language."""

    def __init__(self, switch: Callable[[str], None], active: str | None = None) -> None:
        self._switch = switch
        self._cond = threading.Condition()
        self._active = active  # the adapter in place now
        self._running = 0
        self._queue: deque[tuple[int, str]] = deque()
        self._tickets = 0

    @contextmanager
    def use(self, language: str) -> Iterator[None]:
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._queue.append((ticket, language))
            try:
                while not self._may_enter(ticket, language):
                    self._cond.wait()
                if self._active != language:
                    self._switch(language)  # nobody runs: the model may change
                    self._active = language
            finally:
                self._queue.remove((ticket, language))
                self._cond.notify_all()
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def _may_enter(self, ticket: int, language: str) -> bool:
        ahead = [lang for t, lang in self._queue if t < ticket]
        if self._active == language and all(lang == language for lang in ahead):
            return True
        return self._running == 0 and not ahead

    @property
    def active(self) -> str | None:
        return self._active


def _default_extractor() -> Any:
    """What a wav2vec2 fine-tune saved without its preprocessor_config.json was trained with: 16 kHz, normalised."""
    from transformers import Wav2Vec2FeatureExtractor

    return Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16_000, padding_value=0.0, do_normalize=True)


class TransformersCTC:
    """A Hugging Face CTC checkpoint on PyTorch: MMS with adapters, or a single-language fine-tune."""

    def __init__(self, layout: Layout, threads: int, language: str | None, device: str = "cpu") -> None:
        import torch
        from transformers import AutoFeatureExtractor, AutoModelForCTC

        if device == "cuda" and not torch.cuda.is_available():
            raise Unavailable("A CTC model was asked to run on the GPU, but PyTorch sees no CUDA device.")
        self.device = device
        if threads > 0:
            torch.set_num_threads(threads)  # process-wide: the replica's torch models share these threads
        self.path = layout.path
        self.adapters = layout.adapters
        routed = frozenset({language}) if language else None
        self.languages = frozenset(layout.adapters) if layout.adapters else routed
        started = time.perf_counter()
        try:
            self._extractor = (
                AutoFeatureExtractor.from_pretrained(str(layout.path), local_files_only=True)
                if (layout.path / "preprocessor_config.json").is_file()
                else _default_extractor()
            )
            # MMS: loaded with its first adapter in place (from_pretrained's target_lang), as its model card does
            kwargs: dict[str, Any] = (
                {"target_lang": layout.adapters[0], "ignore_mismatched_sizes": True} if layout.adapters else {}
            )
            model = AutoModelForCTC.from_pretrained(str(layout.path), local_files_only=True, **kwargs)
            self._model = model.to(device).eval()
        except Exception as exc:  # noqa: BLE001 - bad config, bad weights, unknown architecture
            raise Unavailable(
                f"The CTC model in {layout.path} could not be loaded: {type(exc).__name__}: {str(exc)[:300]}. "
                f"{LAYOUT_HELP}"
            ) from None
        self._blank = int(self._model.config.pad_token_id if self._model.config.pad_token_id is not None else 0)
        self._vocabularies = self._read_vocabularies(layout)
        self._gate = AdapterGate(self._switch, active=layout.adapters[0]) if layout.adapters else None
        log.info("loaded CTC model %s (%s) in %.1f s", layout.path, layout.architecture, time.perf_counter() - started)

    def _read_vocabularies(self, layout: Layout) -> dict[str | None, Vocabulary]:
        vocab = json.loads((layout.path / "vocab.json").read_text(encoding="utf-8"))
        config_file = layout.path / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        delimiter = str(config.get("word_delimiter_token") or "|")

        def of(entries: dict[str, int]) -> Vocabulary:
            tokens = [""] * (max(entries.values()) + 1)
            for token, index in entries.items():
                tokens[index] = token
            return Vocabulary.of(tokens, self._blank, (delimiter, " "))

        if layout.adapters:
            return {lang: of(vocab[lang]) for lang in layout.adapters}
        return {None: of(vocab)}

    def vocabulary(self, language: str | None) -> Vocabulary:
        return self._vocabularies[language if self.adapters else None]

    def _switch(self, language: str) -> None:
        started = time.perf_counter()
        self._model.load_adapter(language, local_files_only=True)
        log.debug("adapter %s in place in %.3f s", language, time.perf_counter() - started)

    def log_probs(self, audio: np.ndarray, language: str | None) -> np.ndarray:
        import torch

        features = self._extractor(audio, sampling_rate=16_000, return_tensors="pt")
        wanted = ("input_values", "input_features", "attention_mask")
        inputs = {k: v.to(self.device) for k, v in features.items() if k in wanted}
        with self._adapter(language), torch.inference_mode():
            logits = self._model(**inputs).logits[0]
            vocabulary = len(self.vocabulary(language))
            if logits.shape[-1] != vocabulary:
                raise Unavailable(
                    f"The CTC head of {self.path} scores {logits.shape[-1]} tokens but vocab.json lists {vocabulary}"
                    f"{' for ' + language if language and self.adapters else ''}: they are not of the same model."
                )
        return log_softmax(logits.float().cpu().numpy())

    @contextmanager
    def _adapter(self, language: str | None) -> Iterator[None]:
        if self._gate is None:
            yield
            return
        if language not in self.adapters:
            raise UnsupportedLanguage(
                language or "und", f"has no adapter in {self.path} (adapters: {', '.join(self.adapters)})."
            )
        with self._gate.use(language):
            yield

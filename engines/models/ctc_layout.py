"""What a local CTC speech model directory holds, told from its files alone (no weights loaded, nothing imported
but the standard library): the runtime that runs it and the languages it serves. The model registry, the
``khuluma models`` command and :class:`engines.speech.ctc.CTCRecognizer` all read directories through
:func:`inspect`, so they agree on what a directory is.

Layouts (docs/speech.md, "CTC models: directory layouts"):

``sherpa-onnx``
    sherpa-onnx's export of Meta's Omnilingual ASR CTC models: ``model.int8.onnx`` (or ``model.onnx``) taking the
    raw 16 kHz waveform ``(N, samples)`` and returning CTC logits ``(N, frames, vocabulary)``, and ``tokens.txt``
    (``<token> <id>`` per line; a line with only an id is the space). Language-agnostic.
``transformers``
    a Hugging Face ``Wav2Vec2ForCTC`` / ``Wav2Vec2BertForCTC`` checkpoint: ``config.json``, the weights
    (``model.safetensors`` or ``pytorch_model.bin``) and ``vocab.json``; ``preprocessor_config.json`` where the
    model needs other than wav2vec2's (16 kHz, normalised: the default when it is absent). MMS-style
    (``adapter_attn_dim`` set in the config): ``adapter.<lang>.safetensors`` per language and a ``vocab.json``
    keyed by language; the languages are the adapters present. A single-language fine-tune has a flat
    ``vocab.json``; its language is the one it is routed for.

CTranslate2 (which converts some ``Wav2Vec2ForCTC`` checkpoints) is not a runtime here: its 4.8 converter refuses
the pre-norm, layer-norm-convolution wav2vec2 that MMS and Omnilingual are, and it keeps no adapters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from contracts.errors import Unavailable

SHERPA_ONNX = "sherpa-onnx"
TRANSFORMERS = "transformers"
RUNTIMES = (SHERPA_ONNX, TRANSFORMERS)

ONNX_MODELS = ("model.int8.onnx", "model.onnx")  # the int8 file is preferred where both are present
TOKENS = "tokens.txt"
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
ADAPTER = re.compile(r"^adapter\.([A-Za-z0-9_-]+)\.(safetensors|bin)$")
CTC_ARCHITECTURES = ("Wav2Vec2ForCTC", "Wav2Vec2BertForCTC", "Wav2Vec2ConformerForCTC", "HubertForCTC")

LAYOUT_HELP = (
    "A CTC speech model directory holds one of: (sherpa-onnx) model.int8.onnx or model.onnx with tokens.txt; "
    "(transformers) config.json of a *ForCTC architecture, model.safetensors or pytorch_model.bin, vocab.json and "
    "(optional) preprocessor_config.json, plus adapter.<lang>.safetensors files and a vocab.json keyed by language "
    "for MMS. "
    "See docs/speech.md."
)


@dataclass(frozen=True)
class Layout:
    """A CTC model directory as its files describe it."""

    path: Path
    runtime: str  # SHERPA_ONNX | TRANSFORMERS
    model_file: Path | None = None  # the ONNX file (sherpa-onnx)
    adapters: tuple[str, ...] = ()  # languages with an adapter file (MMS), sorted
    architecture: str = ""  # the checkpoint's CTC architecture (transformers)

    @property
    def multilingual_adapters(self) -> bool:
        return bool(self.adapters)

    @property
    def agnostic(self) -> bool:
        """Whether the model transcribes any language without being told which (Omnilingual CTC)."""
        return self.runtime == SHERPA_ONNX


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Unavailable(f"{path} cannot be read as JSON ({exc}). {LAYOUT_HELP}") from None
    if not isinstance(data, dict):
        raise Unavailable(f"{path} is not a JSON object. {LAYOUT_HELP}")
    return data


def is_ctc_directory(path: Path) -> bool:
    """Whether ``path`` looks like a CTC speech model of any runtime (without validating it)."""
    try:
        inspect(path)
    except Unavailable:
        return False
    return True


def inspect(path: Path | str, runtime: str | None = None) -> Layout:
    """The layout of the CTC model at ``path``; ``runtime`` forces one (else told from the files).

    Raises :class:`Unavailable` naming what is missing when the directory is not a CTC model of that runtime."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise Unavailable(f"The speech model directory {path} does not exist. {LAYOUT_HELP}")
    if runtime is not None and runtime not in RUNTIMES:
        raise Unavailable(f"Unknown CTC runtime {runtime!r}: one of {', '.join(RUNTIMES)}.")
    onnx = next((path / f for f in ONNX_MODELS if (path / f).is_file()), None)
    if runtime == SHERPA_ONNX or (runtime is None and onnx is not None):
        return _sherpa(path, onnx)
    if runtime == TRANSFORMERS or (runtime is None and (path / "config.json").is_file()):
        return _transformers(path)
    raise Unavailable(f"{path} is not a CTC speech model directory. {LAYOUT_HELP}")


def _sherpa(path: Path, onnx: Path | None) -> Layout:
    found = (("model.int8.onnx or model.onnx", onnx is not None), (TOKENS, (path / TOKENS).is_file()))
    missing = [name for name, ok in found if not ok]
    if missing:
        raise Unavailable(f"{path} lacks {' and '.join(missing)} (sherpa-onnx CTC layout). {LAYOUT_HELP}")
    return Layout(path, SHERPA_ONNX, model_file=onnx)


def _architecture(config: dict, path: Path) -> str:
    architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    ctc = next((a for a in architectures if a.endswith("ForCTC")), "")
    if not ctc:
        raise Unavailable(
            f"{path / 'config.json'} names no CTC architecture (architectures: {architectures or 'none'}; expected "
            f"one of {', '.join(CTC_ARCHITECTURES)}). {LAYOUT_HELP}"
        )
    return ctc


def _transformers(path: Path) -> Layout:
    config = _read_json(path / "config.json") if (path / "config.json").is_file() else None
    missing = [
        name
        for name, ok in (
            ("config.json", config is not None),
            ("model.safetensors or pytorch_model.bin", any((path / f).is_file() for f in WEIGHTS)),
            ("vocab.json", (path / "vocab.json").is_file()),
        )
        if not ok
    ]
    if missing:
        raise Unavailable(f"{path} lacks {', '.join(missing)} (transformers CTC layout). {LAYOUT_HELP}")
    assert config is not None
    architecture = _architecture(config, path)
    adapters = tuple(sorted({m.group(1) for f in path.iterdir() if (m := ADAPTER.match(f.name))}))
    if config.get("adapter_attn_dim") and adapters:
        vocab = _read_json(path / "vocab.json")
        nested = all(isinstance(v, dict) for v in vocab.values())
        lacking = [lang for lang in adapters if lang not in vocab]
        if not nested or lacking:
            raise Unavailable(
                f"{path / 'vocab.json'} must be keyed by language for adapter models (MMS), with an entry for every "
                f"adapter.<lang>.safetensors; {'missing: ' + ', '.join(lacking) if lacking else 'it is flat'}. "
                f"{LAYOUT_HELP}"
            )
    elif config.get("adapter_attn_dim"):
        raise Unavailable(
            f"{path} is an adapter model (config.json sets adapter_attn_dim) without any adapter.<lang>.safetensors "
            f"file. {LAYOUT_HELP}"
        )
    return Layout(path, TRANSFORMERS, adapters=adapters, architecture=architecture)

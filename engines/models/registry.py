"""The registry of installed models: ``<data_dir>/models/registry.json`` maps a model name to ``{capability,
path, backend, source, quantization, added_at}``, so every model family is installed and listed the same way
(``khuluma models pull|add|list``), and :func:`model_format` tells what a directory holds.

``capability`` is one of translation | whisper | ner | embeddings | sentiment | speech | llm. ``speech`` is the CTC
speech family: Omnilingual ASR CTC in sherpa-onnx's ONNX layout (backend ``sherpa-onnx``), MMS with its adapters or
a wav2vec2 fine-tune (backend ``transformers``), told apart by ``engines/models/ctc_layout.py``.

Nothing here knows HTTP: failures are :class:`ModelError` with a message meant for the operator.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from engines.models.ctc_layout import ONNX_MODELS, TOKENS, WEIGHTS

Capability = Literal["translation", "whisper", "ner", "embeddings", "sentiment", "speech", "llm"]
CAPABILITIES: tuple[str, ...] = ("translation", "whisper", "ner", "embeddings", "sentiment", "speech", "llm")
Backend = Literal["ctranslate2", "transformers", "sherpa-onnx"]
SPEECH = "speech"  # the CTC speech family: registered as downloaded, never converted
REGISTRY_FILE = "registry.json"


class ModelError(Exception):
    """A model cannot be found, downloaded, converted or loaded; the message says what to do."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    capability: str
    path: str
    backend: str  # ctranslate2 | transformers | sherpa-onnx
    source: str  # Hugging Face id or the directory it came from
    quantization: str | None = None
    added_at: str = ""


def model_format(path: Path) -> Backend | None:
    """``sherpa-onnx`` for a CTC model in sherpa-onnx's ONNX layout (``model.int8.onnx`` or ``model.onnx`` with
    ``tokens.txt``), ``ctranslate2`` for a converted directory, ``transformers`` for a Hugging Face checkpoint, else
    None."""
    if not path.is_dir():
        return None
    if (path / TOKENS).is_file() and any((path / f).is_file() for f in ONNX_MODELS):
        return "sherpa-onnx"
    if (path / "model.bin").is_file() and (path / "config.json").is_file():
        return "ctranslate2"
    if (path / "config.json").is_file() and any((path / f).is_file() for f in WEIGHTS):
        return "transformers"
    return None


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"


class ModelRegistry:
    """The registry file of one data directory; safe against concurrent CLI processes (file lock)."""

    def __init__(self, data_dir: Path | str) -> None:
        self.models_dir = Path(data_dir) / "models"
        self.file = self.models_dir / REGISTRY_FILE

    @contextlib.contextmanager
    def _locked(self, name: str = ".registry.lock") -> Iterator[None]:
        self.models_dir.mkdir(parents=True, exist_ok=True)
        with open(self.models_dir / name, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def conversion_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while a replica converts a checkpoint, so replicas sharing a data dir convert it once."""
        return self._locked(".convert.lock")

    def _read(self) -> dict[str, dict]:
        try:
            return json.loads(self.file.read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as exc:
            raise ModelError(f"The model registry {self.file} is not valid JSON ({exc}); fix or remove it.") from exc

    def _write(self, data: dict[str, dict]) -> None:
        tmp = self.file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.file)

    def list(self, capability: str | None = None) -> list[ModelEntry]:
        entries = [
            ModelEntry(name=name, **{k: v for k, v in d.items() if k != "name"})
            for name, d in sorted(self._read().items())
        ]
        return [e for e in entries if capability is None or e.capability == capability]

    def get(self, ref: str, capability: str | None = None) -> ModelEntry | None:
        """By registered name, or by the Hugging Face id / directory it was installed from."""
        entries = self.list(capability)
        for entry in entries:
            if entry.name == ref:
                return entry
        for entry in entries:
            if entry.source == ref:
                return entry
        return None

    def register(self, entry: ModelEntry) -> ModelEntry:
        if entry.capability not in CAPABILITIES:
            raise ModelError(f"Unknown capability {entry.capability!r}; one of {', '.join(CAPABILITIES)}.")
        entry = ModelEntry(
            **{
                **asdict(entry),
                "path": str(Path(entry.path).resolve()),
                "added_at": entry.added_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        with self._locked():
            data = self._read()
            data[entry.name] = {k: v for k, v in asdict(entry).items() if k != "name"}
            self._write(data)
        return entry

    def remove(self, name: str, delete_files: bool = False) -> ModelEntry:
        with self._locked():
            data = self._read()
            if name not in data:
                raise ModelError(f"No model named {name!r} is registered.")
            entry = ModelEntry(name=name, **data.pop(name))
            self._write(data)
        path = Path(entry.path)
        if delete_files and path.is_relative_to(self.models_dir.resolve()):
            shutil.rmtree(path, ignore_errors=True)
        return entry

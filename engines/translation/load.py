"""The translator of an installed model: its family told from its vocabulary (MADLAD-400's target-language tokens,
else NLLB-200), on the backend its registry entry names."""

from __future__ import annotations

from pathlib import Path

from engines.translation.ct2 import read_ct2_vocabulary
from engines.translation.madlad import MadladTranslator, is_madlad
from engines.translation.nllb import NLLBTranslator, TransformersTranslator
from engines.translation.translator import DEFAULT_OPTIONS, DecodeOptions, SegmentingTranslator, Translator


def load_translator(
    path: Path | str,
    backend: str,
    name: str | None = None,
    options: DecodeOptions = DEFAULT_OPTIONS,
    device: str = "auto",
    compute_type: str = "auto",
    threads: int = 0,
) -> Translator:
    family: type[SegmentingTranslator]
    if backend == "ctranslate2":
        family = MadladTranslator if is_madlad(read_ct2_vocabulary(Path(path))) else NLLBTranslator
    elif backend == "transformers":
        family = TransformersTranslator
    else:
        raise ValueError(f"Unknown translation backend {backend!r} (ctranslate2 or transformers)")
    return family(path, name, options, device, compute_type, threads)

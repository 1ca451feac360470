"""Builders of randomly initialised causal language models (no downloads, no binaries in git).

- ``build_tiny_llama(dest)``: a tiny Llama-architecture checkpoint (two small layers, a 512-token context) with a
  byte-level BPE tokenizer trained here and a ChatML chat template, the layout of an instruction-tuned model on
  Hugging Face. Its output is gibberish by design: the tests check the plumbing (prompt assembly, context window,
  streaming, batching, citations), not answers.
- ``build_shaped(dest, "0.5b" | "1.5b")``: a model of the real shape of Qwen2.5-0.5B-Instruct or
  Qwen2.5-1.5B-Instruct (their published configurations), random weights in bfloat16, with a word-level tokenizer
  of the real vocabulary size: the same cost per token as the real model, for the benchmark.

Script use::

    .venv/bin/python scripts/bench/_tiny_llm.py /tmp/tiny-llama [--ct2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# The published configurations (huggingface.co/Qwen/Qwen2.5-0.5B-Instruct and -1.5B-Instruct, config.json).
SHAPES: dict[str, dict[str, object]] = {
    "0.5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
}
QWEN_COMMON: dict[str, object] = {
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
}


def _corpus() -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _tiny_models import training_lines

    english = (
        "The clinic opens at eight in the morning and closes at four. Water will be off on Tuesday in ward 12. "
        "Sources: Question: Answer the question from the documents. I don't know from these documents."
    )
    return [*training_lines(600), english] * 2


def _save_tokenizer(tokenizer: object, dest: Path, eos: str, template: str | None) -> int:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=eos, pad_token="<|endoftext|>", bos_token="<|endoftext|>"
    )  # CTranslate2's Llama converter needs a start token (Qwen's template never writes it)
    if template:
        fast.chat_template = template
    fast.save_pretrained(dest)
    return len(fast)


def build_tiny_llama(dest: Path, seed: int = 0, context: int = 512, template: bool = True) -> Path:
    """Write a tiny Llama-architecture HF checkpoint (with its tokenizer and chat template) into ``dest``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    vocab_size = _save_tokenizer(tokenizer, dest, "<|im_end|>", CHATML if template else None)
    eos = tokenizer.token_to_id("<|im_end|>")

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.token_to_id("<|endoftext|>"),
        eos_token_id=eos,
        pad_token_id=tokenizer.token_to_id("<|endoftext|>"),
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for param in model.parameters():  # wide weights: the output depends on the input
            if param.dim() == 2:
                param.normal_(0.0, 0.3)
        for token in SPECIAL:  # special tokens score 0: answers run to their token allowance
            model.lm_head.weight[tokenizer.token_to_id(token)] = 0.0
    model.save_pretrained(dest)
    GenerationConfig(eos_token_id=eos).save_pretrained(dest)
    return dest


def build_shaped(dest: Path, shape: str, seed: int = 0) -> Path:
    """A Qwen2.5-``shape``-Instruct-shaped checkpoint with random bfloat16 weights and a word-level tokenizer of the
    real vocabulary size (``w0`` ... ``w151932`` and the three ChatML specials)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    size = int(QWEN_COMMON["vocab_size"])  # type: ignore[call-overload]
    words = {f"w{i}": i for i in range(size - len(SPECIAL))}
    tokenizer = Tokenizer(models.WordLevel(vocab=words, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer.add_special_tokens(SPECIAL)
    _save_tokenizer(tokenizer, dest, "<|im_end|>", CHATML)
    eos = tokenizer.token_to_id("<|im_end|>")
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bfloat16: half the memory of float32 at 1.5B
    try:
        config = Qwen2Config(
            **QWEN_COMMON, **SHAPES[shape], eos_token_id=eos, bos_token_id=None, torch_dtype="bfloat16"
        )
        model = Qwen2ForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():
        for token in SPECIAL:  # logit 0 among 151,936: never the end, every answer runs to its allowance
            model.lm_head.weight[tokenizer.token_to_id(token)] = 0.0
    model.save_pretrained(dest)
    GenerationConfig(eos_token_id=eos).save_pretrained(dest)
    (dest / "shape.json").write_text(json.dumps({"shape": shape, **SHAPES[shape], **QWEN_COMMON}))
    return dest


def convert(hf_dir: Path, dest: Path, quantization: str | None = "int8") -> Path:
    """Convert with the same code path `khuluma models add|pull` uses."""
    from engines.models.install import convert_to_ctranslate2

    return convert_to_ctranslate2(Path(hf_dir), Path(dest), "llm", quantization=quantization)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--shape", choices=[*SHAPES, "tiny"], default="tiny")
    ap.add_argument("--ct2", action="store_true", help="Also convert to CTranslate2 int8 into <dest>-ct2.")
    args = ap.parse_args()
    hf = build_tiny_llama(args.dest) if args.shape == "tiny" else build_shaped(args.dest, args.shape)
    print(hf)
    if args.ct2:
        print(convert(hf, Path(f"{args.dest}-ct2")))

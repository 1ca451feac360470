"""Builders of tiny, randomly initialised models with the real architectures (no downloads, no binaries in git).

``build_tiny_nllb(dest)`` writes a Hugging Face NLLB-architecture checkpoint (M2M100 with a few small layers,
random weights, a SentencePiece BPE model trained here on a few hundred generated lines, the 202 NLLB language
tokens added), the same layout as ``facebook/nllb-200-distilled-600M``. Its output is gibberish by design: the
tests check the plumbing (language tokens, batching order, sentence splitting, reloads), not translation quality.

Script use (for the benchmark or by hand)::

    .venv/bin/python scripts/bench/_tiny_models.py /tmp/tiny-nllb [--seed 1] [--ct2]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

# A small bag of words (isiZulu, Sesotho, English, ...) for the training lines of the SentencePiece model.
_CORPUS = (
    "umuntu abantu sawubona molo dumela hallo hello world the house is big small water amanzi metsi book "
    "incwadi ibuku buka run walk child umntwana ngwana mother umama mme father ubaba ntate good bad city "
    "village motse car imoto road indlela today namhlanje tomorrow kusasa ke ngiyabonga enkosi thank you "
    "very much we are going to school sikolo sekolo rain pula imvula sun letsatsi ilanga dog inja ntja"
)
WORDS = _CORPUS.split()


def training_lines(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice([".", "?", "!", ",", ""]))
    return out


def build_tiny_nllb(dest: Path, seed: int = 0, vocab_size: int = 240, d_model: int = 32, layers: int = 2) -> Path:
    """Write a tiny NLLB-architecture HF checkpoint into ``dest`` (created); returns ``dest``."""
    import sentencepiece as spm
    import torch
    from transformers import AutoTokenizer, M2M100Config, M2M100ForConditionalGeneration
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    # SentencePiece BPE with the NLLB special ids (<unk>=0, <s>=1, </s>=2; HF adds the fairseq offset of 1).
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines(seed=seed)),
        model_prefix=str(dest / "sentencepiece.bpe"),
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    (dest / "sentencepiece.bpe.vocab").unlink(missing_ok=True)
    (dest / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NllbTokenizer"}))
    tokenizer = AutoTokenizer.from_pretrained(dest)
    vocab = tokenizer.get_vocab()
    tokenizer.add_tokens([c for c in FAIRSEQ_LANGUAGE_CODES if c not in vocab], special_tokens=True)
    tokenizer.save_pretrained(dest)

    torch.manual_seed(seed)
    config = M2M100Config(
        vocab_size=len(tokenizer),
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=256,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.eos_token_id,
        tokenizer_class="NllbTokenizer",
        tie_word_embeddings=False,  # tied random embeddings just echo the last token; untied ones vary
    )
    model = M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():
        # Wide random weights make the output depend on the input (small ones decode the same text for all).
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.3)
        # Language and control tokens score 0 (median), so decoded text is mostly ordinary pieces.
        vocab = tokenizer.get_vocab()
        for token in [*FAIRSEQ_LANGUAGE_CODES, "<s>", "<pad>", "<unk>", "<mask>"]:
            model.lm_head.weight[vocab[token]] = 0.0
    model.save_pretrained(dest)
    return dest


def build_tiny_madlad(dest: Path, seed: int = 0, vocab_size: int = 200, d_model: int = 32) -> Path:
    """Write a tiny MADLAD-400-architecture HF checkpoint into ``dest``: T5 with a few small layers, random
    weights, a SentencePiece unigram model (``spiece.model``) trained here with MADLAD's target-language tokens
    (``<2zu>`` ...) as symbols of their own, the layout of ``google/madlad400-3b-mt``."""
    import sentencepiece as spm
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    from engines.translation.madlad import MADLAD_TOKENS

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines(seed=seed)),
        model_prefix=str(dest / "spiece"),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        user_defined_symbols=sorted(MADLAD_TOKENS.values()),
    )
    (dest / "spiece.vocab").unlink(missing_ok=True)
    (dest / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": 0}))
    tokenizer = AutoTokenizer.from_pretrained(dest)
    tokenizer.save_pretrained(dest)
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=d_model,
        d_kv=8,
        d_ff=2 * d_model,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=tokenizer.pad_token_id,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dropout_rate=0.0,
    )
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.3)
    model.save_pretrained(dest)
    return dest


def build_tiny_xlmr(dest: Path, task: str, labels: list[str], forced: str | None = None, seed: int = 0) -> Path:
    """Write a tiny XLM-RoBERTa checkpoint into ``dest``: the architecture of the MasakhaNER token classifier
    (``task="token"``) and of the AfriSenti sentiment classifier (``task="sequence"``), with random weights and a
    SentencePiece-style unigram tokenizer trained here. ``forced``: the label every token (or text) gets, whatever
    the random encoder says, so a test knows the answer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import (
        PreTrainedTokenizerFast,
        XLMRobertaConfig,
        XLMRobertaForSequenceClassification,
        XLMRobertaForTokenClassification,
    )

    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        training_lines(seed=seed), trainers.UnigramTrainer(vocab_size=200, special_tokens=special, unk_token="<unk>")
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        cls_token="<s>",
        sep_token="</s>",
        mask_token="<mask>",
        model_max_length=64,
    )
    config = XLMRobertaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=66,
        pad_token_id=tok.token_to_id("<pad>"),
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    torch.manual_seed(seed)
    cls = XLMRobertaForTokenClassification if task == "token" else XLMRobertaForSequenceClassification
    model = cls(config).eval()
    if forced is not None:
        head = model.classifier if task == "token" else model.classifier.out_proj
        with torch.no_grad():
            head.weight.zero_()
            head.bias.fill_(-10.0)
            head.bias[labels.index(forced)] = 10.0
    dest = Path(dest)
    model.save_pretrained(dest)
    fast.save_pretrained(dest)
    return dest


def convert_tiny(hf_dir: Path, dest: Path, quantization: str | None = "int8") -> Path:
    """Convert with the same code path `khuluma models add` uses."""
    from engines.models.install import convert_to_ctranslate2

    return convert_to_ctranslate2(Path(hf_dir), Path(dest), "translation", quantization=quantization)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ct2", action="store_true", help="Also convert to CTranslate2 int8 into <dest>-ct2.")
    args = ap.parse_args()
    hf = build_tiny_nllb(args.dest, seed=args.seed)
    print(hf)
    if args.ct2:
        print(convert_tiny(hf, Path(f"{args.dest}-ct2")))

"""Tiny CTC speech models of the real formats, built by the tests (no downloads, nothing binary in git): a few
hundred kB each, seconds to build, cached per test session.

- :func:`build_mms`: a randomly initialised small ``Wav2Vec2ForCTC`` with per-language adapters, saved the way
  ``facebook/mms-1b-all`` ships (``config.json`` with ``adapter_attn_dim``, ``model.safetensors``,
  ``adapter.<lang>.safetensors`` per language, one ``vocab.json`` keyed by language, ``tokenizer_config.json``,
  ``special_tokens_map.json``, ``preprocessor_config.json``). Each language has its own alphabet (so its own CTC
  head size) and adapter weights.
- :func:`build_finetune`: a single-language ``Wav2Vec2ForCTC`` (flat ``vocab.json``), as a wav2vec2 fine-tune
  for one language ships.
- :func:`build_omnilingual_onnx`: the same architecture exported to the layout sherpa-onnx loads for Meta's
  Omnilingual ASR CTC models: ``model.onnx`` (raw waveform ``x`` in, ``logits`` out, metadata as sherpa-onnx's
  export writes it), ``model.int8.onnx`` (onnxruntime's dynamic quantisation of the MatMuls, as sherpa-onnx
  quantises) and ``tokens.txt`` (``<s>`` 0 is the CTC blank, a line with only an id is the space).

The weights are random, so the words are meaningless; tests assert structure and routing. The CTC heads are shaped
(:func:`_shape_head`) so that the models "speak": mostly blank frames, confident letters at a speech-like rate and
words of a few letters, so that output passes the letter-soup guards (``engines/speech/ctc/guards.py``) the way a
real model's would, and reaches the record. With ``speaking=False`` the head stays as initialised: low-confidence
soup that the guards must drop.

For any test module::

    from tests.speech_models import TinyCTCModels, session_ctc_models


    @pytest.fixture(scope="session")
    def ctc_models(tmp_path_factory) -> TinyCTCModels:
        return session_ctc_models(tmp_path_factory)


    def test_x(ctc_models):
        ctc_models.mms  # Path of the MMS-style directory (zul, xho)
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from scripts.bench._ctc_models import export_waveform_model, quantize_int8

SAMPLE_RATE = 16_000
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # wav2vec2 / MMS order: <pad> (id 0) is the CTC blank
DELIMITER = "|"
# Each language's alphabet: different sizes, so switching adapters resizes the CTC head as real MMS adapters do.
ALPHABETS: dict[str, str] = {
    "zul": "abcdeghiklmnopqstuwyz",
    "xho": "abcdefghijklmnopqrstuvwxyz'",
    "sot": "abdefhiklmnopqrstuwy",
    "nso": "abdefghiklmnoprstuwy",
}
VOWELS = set("aeiou")
BUILD_VERSION = "1"  # bump when the builders change: cached directories are rebuilt


def _tiny_config(vocab_size: int, adapter_dim: int | None, pad: int = 0, bos: int = 1, eos: int = 2):
    from transformers import Wav2Vec2Config

    return Wav2Vec2Config(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16,) * 7,
        conv_kernel=(10, 3, 3, 3, 3, 2, 2),
        conv_stride=(5, 2, 2, 2, 2, 2, 2),  # 320 samples (20 ms) per frame, as every wav2vec2 / MMS / Omnilingual
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,  # pre-norm, as MMS-1B and Omnilingual
        adapter_attn_dim=adapter_dim,
        pad_token_id=pad,
        bos_token_id=bos,
        eos_token_id=eos,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
        final_dropout=0.0,
        architectures=["Wav2Vec2ForCTC"],
    )


def _vocab(alphabet: str) -> dict[str, int]:
    tokens = [*SPECIALS, DELIMITER, *alphabet]
    return {t: i for i, t in enumerate(tokens)}


def _shape_head(model, tokens: list[str], blank: int, seed: int, speaking: bool) -> None:
    """Make a random CTC head "speak" as a trained head does: blank on three frames in four, a confident letter on
    the others, a word delimiter on about one non-blank frame in five (words of a few letters, vowels a little
    likelier), never a special token. A random head instead emits a different low-confidence letter on almost every
    frame.

    How: two random directions of the hidden state steer it. The blank's logit falls with the projection on ``u``
    (letters win where it is high), the delimiter's rises with the projection on ``v``; their biases are set at
    quantiles of those projections on speech-like noise (calibrated on the model's own hidden states, so they hold
    for any random initialisation). The letters' logits are random projections of unit spread. All logits are then
    sharpened six times, so the winners are confident."""
    import torch

    if not speaking:
        return
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        audio = np.concatenate([speechlike(4.0, s) for s in range(3)])
        x = torch.from_numpy((audio - audio.mean()) / (audio.std() + 1e-5))[None]
        hidden = model.wav2vec2(x).last_hidden_state[0]  # (frames, hidden)
        dim = hidden.shape[-1]

        def steer() -> tuple[torch.Tensor, torch.Tensor]:  # a direction (scaled to unit spread) and its projections
            direction = torch.randn(dim, generator=generator)
            direction /= (hidden @ direction).std().clamp_min(1e-6)
            return direction, hidden @ direction

        weight = torch.randn((len(tokens), dim), generator=generator)
        weight /= (hidden @ weight.T).std(0).clamp_min(1e-6)[:, None]  # unit spread per token on these frames
        bias = torch.zeros(len(tokens))
        silent = torch.tensor([t.startswith("<") and i != blank for i, t in enumerate(tokens)])
        delimiter = torch.tensor([t in (DELIMITER, " ") for t in tokens])
        bias[silent] = -60.0
        vowel = torch.tensor([t in VOWELS for t in tokens])
        base = hidden @ weight.T + bias
        consonant = base.masked_fill(silent | delimiter | vowel, -1e9)
        consonant[:, blank] = -1e9
        w, along_w = steer()  # vowels win on about 45% of the letter frames
        best_vowel = base.masked_fill(~vowel, -1e9).max(-1).values
        lift = torch.quantile(consonant.max(-1).values - best_vowel - 3 * along_w, 0.45)
        weight[vowel] += 3.0 * w
        bias[vowel] += lift
        letters = (hidden @ weight.T + bias).masked_fill(silent | delimiter, -1e9)
        letters[:, blank] = -1e9
        best_letter = letters.max(-1).values
        v, along_v = steer()
        for index in torch.nonzero(delimiter).flatten().tolist():  # the delimiter wins on one non-blank frame in five
            weight[index] = 3.0 * v
            bias[index] = torch.quantile(best_letter - 3.0 * along_v, 0.2)
        scores = (hidden @ weight.T + bias).masked_fill(silent, -1e9)
        scores[:, blank] = -1e9
        u, along_u = steer()
        weight[blank] = -3.0 * u
        bias[blank] = torch.quantile(scores.max(-1).values + 3.0 * along_u, 0.75)  # blank on 3 frames in 4
        model.lm_head.weight.copy_(6.0 * weight)
        model.lm_head.bias.copy_(6.0 * bias)


def _feature_extractor(dest: Path) -> None:
    from transformers import Wav2Vec2FeatureExtractor

    Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=SAMPLE_RATE, padding_value=0.0, do_normalize=True, return_attention_mask=True
    ).save_pretrained(dest)


def _tokenizer_files(dest: Path, vocab: dict, target_lang: str | None) -> None:
    (dest / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    (dest / "special_tokens_map.json").write_text(json.dumps(specials, indent=1))
    config = {
        **specials,
        "tokenizer_class": "Wav2Vec2CTCTokenizer",
        "word_delimiter_token": DELIMITER,
        "do_lower_case": False,
        "replace_word_delimiter_char": " ",
        "target_lang": target_lang,
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def build_mms(dest: Path, languages: tuple[str, ...] = ("zul", "xho"), *, speaking: bool = True, seed: int = 0) -> Path:
    """An MMS-style directory: one small wav2vec2 with an adapter (and CTC head) per language."""
    import torch
    from safetensors.torch import save_file
    from transformers import Wav2Vec2ForCTC

    dest.mkdir(parents=True, exist_ok=True)
    vocabs = {lang: _vocab(ALPHABETS[lang]) for lang in languages}
    torch.manual_seed(seed)
    model = Wav2Vec2ForCTC(_tiny_config(len(vocabs[languages[0]]), adapter_dim=8)).eval()
    for index, lang in enumerate(languages):
        tokens = list(vocabs[lang])
        if model.lm_head.out_features != len(tokens):
            model.lm_head = torch.nn.Linear(model.config.hidden_size, len(tokens))
            model.config.vocab_size = len(tokens)
        torch.manual_seed(seed + 100 + index)
        for module in model.modules():  # a fresh adapter per language
            if type(module).__name__ == "Wav2Vec2AttnAdapterLayer":
                module.linear_1.reset_parameters()
                module.linear_2.reset_parameters()
        _shape_head(model, tokens, 0, seed + 200 + index, speaking)
        weights = {name: param.detach().clone().contiguous() for name, param in model._get_adapters().items()}
        save_file(weights, str(dest / f"adapter.{lang}.safetensors"))
        if index == 0:  # the base checkpoint carries the first language's adapter, as mms-1b-all carries eng's
            model.save_pretrained(dest)
    _feature_extractor(dest)
    _tokenizer_files(dest, vocabs, None)
    return dest


def build_finetune(dest: Path, language: str = "zul", *, speaking: bool = True, seed: int = 1) -> Path:
    """A single-language wav2vec2 CTC fine-tune (flat vocab.json)."""
    import torch
    from transformers import Wav2Vec2ForCTC

    dest.mkdir(parents=True, exist_ok=True)
    vocab = _vocab(ALPHABETS[language])
    torch.manual_seed(seed)
    model = Wav2Vec2ForCTC(_tiny_config(len(vocab), adapter_dim=None)).eval()
    _shape_head(model, list(vocab), 0, seed + 200, speaking)
    model.save_pretrained(dest)
    _feature_extractor(dest)
    _tokenizer_files(dest, vocab, None)
    return dest


OMNI_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", " ", *"abcdefghijklmnopqrstuvwxyz"]  # <s> (0) is the blank


def build_omnilingual_onnx(dest: Path, *, speaking: bool = True, seed: int = 2, fp32: bool = True) -> Path:
    """The sherpa-onnx Omnilingual CTC layout: model.int8.onnx (and model.onnx with ``fp32``) plus tokens.txt."""
    import onnx
    import torch
    from transformers import Wav2Vec2ForCTC

    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = Wav2Vec2ForCTC(_tiny_config(len(OMNI_TOKENS), adapter_dim=None, pad=1, bos=0, eos=2)).eval()
    _shape_head(model, OMNI_TOKENS, 0, seed + 200, speaking)
    export_waveform_model(model, dest / "model.onnx", comment="tiny test model")
    quantize_int8(dest / "model.onnx", dest / "model.int8.onnx")
    onnx.checker.check_model(str(dest / "model.int8.onnx"))
    if not fp32:
        (dest / "model.onnx").unlink()
    lines = [f"{t} {i}" if t != " " else str(i) for i, t in enumerate(OMNI_TOKENS)]
    (dest / "tokens.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


@dataclass(frozen=True)
class TinyCTCModels:
    mms: Path  # MMS-style: adapters zul, xho
    finetune: Path  # single language: zul
    omnilingual: Path  # sherpa-onnx Omnilingual layout
    mute_finetune: Path  # a fine-tune whose head was left random: low-confidence letter soup


_lock = threading.Lock()


def tiny_ctc_models(root: Path) -> TinyCTCModels:
    """Build (once per ``root``) every tiny CTC model; later calls reuse the directories."""
    with _lock:
        marker = root / f".built-{BUILD_VERSION}"
        models = TinyCTCModels(root / "mms", root / "finetune-zul", root / "omnilingual", root / "mute-finetune")
        if marker.is_file():
            return models
        shutil.rmtree(root, ignore_errors=True)
        build_mms(models.mms)
        build_finetune(models.finetune)
        build_omnilingual_onnx(models.omnilingual)
        build_finetune(models.mute_finetune, speaking=False)
        marker.write_text("ok")
        return models


def session_ctc_models(tmp_path_factory: pytest.TempPathFactory) -> TinyCTCModels:
    """The tiny models of this test session (built by the first test module that asks, shared by the others)."""
    pytest.importorskip("torch")
    return tiny_ctc_models(tmp_path_factory.getbasetemp() / "ctc-models")


def speechlike(seconds: float, seed: int = 0, *, start: float = 0.0) -> np.ndarray:
    """Noise shaped like speech (syllable-rate bursts) at 16 kHz: something for random models to transcribe."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * (t + start))
    voice = np.sin(2 * np.pi * (140 + 40 * np.sin(2 * np.pi * 0.5 * t)) * t)
    return (0.3 * envelope * (voice + 0.3 * rng.standard_normal(n))).astype(np.float32)


PARROT_ZULU = "ngiyabonga kakhulu ngosizo lwakho namuhla bengifuna ukwazi ukuthi imali yami isephi"


def build_parrot_onnx(dest: Path, sentence: str = PARROT_ZULU) -> Path:
    """A CTC model of the sherpa-onnx Omnilingual layout that has learnt one sentence: whatever the audio, its
    frames spell ``sentence`` (two frames a letter, a blank between letters), over and over. Its transcript of any
    speech reads as that sentence's language to the text language identifier, so it drives auto-detection by the
    documented signal (a CTC transcript read by the text language identifier), and shows that the detection gate
    keeps audio Whisper places in a served language away from it."""
    import onnx
    from onnx import TensorProto, helper

    dest.mkdir(parents=True, exist_ok=True)
    index = {t: i for i, t in enumerate(OMNI_TOKENS)}
    frames: list[int] = []
    for letter in sentence + " ":
        frames += [index[letter], index[letter], 0]  # 0 (<s>) is the blank
    table = np.full((len(frames), len(OMNI_TOKENS)), -8.0, dtype=np.float32)
    table[np.arange(len(frames)), frames] = 8.0
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["samples"], axis=0),
        helper.make_node("Div", ["samples", "stride"], ["count"]),
        helper.make_node("Range", ["zero", "count", "one"], ["steps"]),
        helper.make_node("Mod", ["steps", "period"], ["position"]),
        helper.make_node("Gather", ["table", "position"], ["rows"], axis=0),
        helper.make_node("Unsqueeze", ["rows", "axes"], ["logits"]),
    ]
    scalars = {"zero": 0, "one": 1, "stride": 320, "period": len(frames)}
    initializers = [helper.make_tensor(n, TensorProto.INT64, [], [v]) for n, v in scalars.items()]
    initializers += [
        helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
        helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.flatten().tolist()),
    ]
    graph = helper.make_graph(
        nodes,
        "parrot",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "num_samples"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", "num_frames", len(OMNI_TOKENS)])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    onnx.save(model, str(dest / "model.int8.onnx"))
    lines = [f"{t} {i}" if t != " " else str(i) for i, t in enumerate(OMNI_TOKENS)]
    (dest / "tokens.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest

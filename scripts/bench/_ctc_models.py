"""CTC models with the real architectures and random weights, for the CTC bench (a random model of the real shape
costs what the real one costs), and the ONNX export the tests' tiny models share (tests/speech_models.py).

- :func:`omnilingual_300m_config`: Meta's omniASR_CTC_300M (fairseq2 ``Wav2Vec2AsrConfig``: 24 pre-norm layers,
  1024 wide, 16 heads, FFN 4096, seven 512-channel convolutions with layer norm, a 128-wide positional convolution
  in 16 groups, 9,812 tokens), as a Hugging Face ``Wav2Vec2Config``;
- :func:`mms_1b_all_config`: ``facebook/mms-1b-all``'s config.json (48 pre-norm layers, 1280 wide, 16 heads, FFN
  5120, adapters of width 16 in every layer);
- :func:`export_waveform_model`: sherpa-onnx's Omnilingual export (raw waveform ``x`` in, ``logits`` out, opset 14,
  its metadata); :func:`quantize_int8`: its int8 step (onnxruntime's dynamic quantisation of the MatMuls, QUInt8).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAMPLE_RATE = 16_000
CONV = {"conv_dim": (512,) * 7, "conv_kernel": (10, 3, 3, 3, 3, 2, 2), "conv_stride": (5, 2, 2, 2, 2, 2, 2)}


def omnilingual_300m_config(vocab_size: int = 9812) -> Any:
    from transformers import Wav2Vec2Config

    return Wav2Vec2Config(
        vocab_size=vocab_size,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        feat_extract_norm="layer",
        conv_bias=True,
        do_stable_layer_norm=True,
        num_conv_pos_embeddings=128,
        num_conv_pos_embedding_groups=16,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        architectures=["Wav2Vec2ForCTC"],
        **CONV,
    )


def mms_1b_all_config(vocab_size: int = 154) -> Any:
    from transformers import Wav2Vec2Config

    return Wav2Vec2Config(
        vocab_size=vocab_size,
        hidden_size=1280,
        num_hidden_layers=48,
        num_attention_heads=16,
        intermediate_size=5120,
        feat_extract_norm="layer",
        conv_bias=True,
        do_stable_layer_norm=True,
        num_conv_pos_embeddings=128,
        num_conv_pos_embedding_groups=16,
        adapter_attn_dim=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        architectures=["Wav2Vec2ForCTC"],
        **CONV,
    )


def export_waveform_model(model: Any, out: Path, *, comment: str, seconds: float = 2.0) -> Path:
    """Export a ``Wav2Vec2ForCTC`` as sherpa-onnx's Omnilingual export does: input ``x`` (N, num_samples), output
    ``logits`` (N, num_frames, vocab), opset 14, its metadata (model_type omnilingual-asr, vocab_size ...)."""
    import onnx
    import torch

    class Waveform(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x).logits

    x = torch.rand(1, int(SAMPLE_RATE * seconds))
    with torch.no_grad():
        torch.onnx.export(
            Waveform().eval(),
            (x,),
            str(out),
            opset_version=14,
            input_names=["x"],
            output_names=["logits"],
            dynamic_axes={"x": {0: "N", 1: "num_samples"}, "logits": {0: "N", 1: "num_frames"}},
            dynamo=False,
        )
    proto = onnx.load(str(out))
    meta = {
        "vocab_size": model.config.vocab_size,
        "model_type": "omnilingual-asr",
        "version": "1",
        "sample_rate": SAMPLE_RATE,
        "model_author": "khuluma (random weights)",
        "comment": comment,
    }
    del proto.metadata_props[:]
    for key, value in meta.items():
        prop = proto.metadata_props.add()
        prop.key, prop.value = key, str(value)
    onnx.save(proto, str(out))
    return out


def quantize_int8(source: Path, out: Path) -> Path:
    """sherpa-onnx's int8 step: dynamic quantisation of the MatMuls to QUInt8 weights."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        model_input=str(source), model_output=str(out), op_types_to_quantize=["MatMul"], weight_type=QuantType.QUInt8
    )
    return out


def write_tokens(out: Path, size: int) -> Path:
    """A ``tokens.txt`` of ``size`` tokens in Omnilingual's order: <s> (the blank), <pad>, </s>, <unk>, the space."""
    names = ["<s>", "<pad>", "</s>", "<unk>", " ", *(f"t{i}" for i in range(5, size))]
    out.write_text("\n".join(f"{t} {i}" if t != " " else str(i) for i, t in enumerate(names)) + "\n", encoding="utf-8")
    return out


STRIP_ABOVE = 4096  # initializers with more elements than this travel as shapes only (the weights)
STRIPPED = "khuluma:stripped"  # doc_string mark of an initializer whose values were left out


def strip_weights(source: Path, out: Path, above: int = STRIP_ABOVE) -> Path:
    """``source`` without its large initializers' values (a few MB instead of hundreds): each keeps its name, type
    and shape, marked :data:`STRIPPED`; small ones (shapes, scales, zero points) stay exact. :func:`inflate` fills
    them with random values of the same type: a graph of the same cost, for a machine that cannot build it (the GPU
    check: no PyTorch there, and 64 MiB per transfer)."""
    import onnx

    proto = onnx.load(str(source))
    for tensor in proto.graph.initializer:
        size = 1
        for dim in tensor.dims:
            size *= dim
        if size > above:
            tensor.ClearField("raw_data")
            for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                tensor.ClearField(field)
            tensor.doc_string = STRIPPED
    onnx.save(proto, str(out))
    return out


def inflate(skeleton: Path, out: Path, seed: int = 0) -> Path:
    """A loadable model from :func:`strip_weights`'s skeleton: random weights (normal, 0.02) in float tensors,
    uniform bytes in 8-bit ones (int8 ONNX's quantised MatMul weights)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    proto = onnx.load(str(skeleton))
    for index, tensor in enumerate(proto.graph.initializer):
        if tensor.doc_string != STRIPPED:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        shape = tuple(tensor.dims)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            values = rng.integers(max(info.min, -128), min(info.max, 255) + 1, size=shape, dtype=dtype)
        else:
            values = (0.02 * rng.standard_normal(shape)).astype(dtype)
        filled = numpy_helper.from_array(values, tensor.name)
        proto.graph.initializer[index].CopyFrom(filled)
    onnx.save(proto, str(out))
    return out

"""vLLM through Ray Serve LLM: the configuration of its ``LLMServer`` deployment and the reading of what that
deployment streams back. Pure data: the deployment layer (``deployments/llm_vllm.py``) hands these to
``ray.serve.llm``, which needs the ``vllm`` extra (and GPUs).

The LLM replica keeps the tokenizer and the chat template (it assembles every prompt, so grounding and the context
window behave the same on both engines) and sends vLLM the prompt's token ids through the completions method.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from contracts.errors import Unavailable
from contracts.settings import LLMSettings


def llm_config(settings: LLMSettings, model_id: str, model_path: str, context_window: int) -> dict[str, Any]:
    """Keyword arguments of ``ray.serve.llm.LLMConfig``: the model from a local directory (nothing is downloaded),
    the context window as vLLM's ``max_model_len``, one GPU per tensor-parallel rank, bounded autoscaling."""
    engine_kwargs: dict[str, Any] = {
        "max_model_len": context_window,
        "tensor_parallel_size": settings.vllm_tensor_parallel_size,
        "gpu_memory_utilization": settings.vllm_gpu_memory_utilization,
        **settings.vllm_engine_kwargs,
    }
    config: dict[str, Any] = {
        "model_loading_config": {"model_id": model_id, "model_source": model_path},
        "engine_kwargs": engine_kwargs,
        "deployment_config": {
            "autoscaling_config": {"min_replicas": 1, "max_replicas": settings.vllm_max_replicas},
            "max_ongoing_requests": 64,
        },
        "log_engine_metrics": True,
    }
    if settings.vllm_accelerator_type:
        config["accelerator_type"] = settings.vllm_accelerator_type
    return config


def completion_request(model_id: str, prompt_ids: list[int], max_tokens: int, sampling: Any) -> dict[str, Any]:
    """The fields of the OpenAI completion request sent to the LLMServer (token ids as the prompt: the template
    already wrote any start token)."""
    return {
        "model": model_id,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "stop": list(sampling.stop) or None,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@dataclass
class Piece:
    """What one streamed completion chunk says."""

    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None


def pieces(chunk: Any) -> list[Piece]:
    """The pieces of what the LLMServer yields on a stream: a list of server-sent-event strings
    (``data: {...}\\n\\n``, ``data: [DONE]``), one such string, a response object, or an error response."""
    if isinstance(chunk, list | tuple):
        return [p for item in chunk for p in pieces(item)]
    if hasattr(chunk, "model_dump"):
        chunk = chunk.model_dump()
    if isinstance(chunk, dict):
        return _from_object(chunk)
    if not isinstance(chunk, str):
        raise Unavailable(f"The vLLM server answered something unexpected ({type(chunk).__name__}).")
    found = []
    for line in chunk.splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        found += _from_object(json.loads(data))
    return found


def _from_object(data: dict[str, Any]) -> list[Piece]:
    if "error" in data or data.get("object") == "error":
        error = data.get("error", data)
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise Unavailable(f"The vLLM server refused the generation: {message}")
    out = [Piece(str(c.get("text") or ""), c.get("finish_reason")) for c in _choices(data.get("choices"))]
    usage = data.get("usage")
    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
        out.append(Piece(completion_tokens=int(usage["completion_tokens"])))
    return out


def _choices(value: Any) -> Iterable[dict[str, Any]]:
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []

"""vLLM through Ray Serve LLM (``ray.serve.llm``, the ``vllm`` extra): the ``LLMServer`` deployment the app builder
binds to the LLM deployment when ``llm.engine`` is ``vllm``, and the streaming of one completion from it.

``ray.serve.llm`` imports vLLM's protocol models, so nothing here is imported unless the engine is vLLM; without
the extra, building the application fails at once with one line that says what to install.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from contracts.llm import FinishReason, GenerationDelta, GenerationEnd, GenerationEvent, Sampling
from contracts.settings import Settings
from engines.llm import vllm
from engines.llm.prompt import Assembled
from engines.llm.tokenizer import ChatTokenizer
from engines.models.registry import ModelRegistry
from engines.models.resolve import resolve

SERVER_NAME = "LLMServer"
MISSING_EXTRA = (
    "KHULUMA_LLM_ENGINE=vllm needs Ray Serve LLM and vLLM on the cluster's GPU nodes: pip install 'khuluma[vllm]' "
    "(or set KHULUMA_LLM_ENGINE=ctranslate2)"
)


def server_config(settings: Settings) -> dict[str, Any]:
    """``LLMConfig`` keyword arguments for the configured model (resolved on this node: the same directory must
    exist on every node that runs an LLM or LLMServer replica; nothing is downloaded)."""
    s = settings.llm
    if not s.model:
        raise ValueError("KHULUMA_LLM_ENGINE=vllm needs KHULUMA_LLM_MODEL (a Hugging Face directory or a name).")
    entry = resolve(ModelRegistry(settings.data_dir), s.model, "llm", prefer="transformers")
    window = ChatTokenizer(entry.path, s.context_tokens).context_window
    return vllm.llm_config(s, entry.name, entry.path, window)


def build_server(settings: Settings, overrides: dict[str, Any] | None = None) -> Any:
    """The bound ``LLMServer`` deployment (an Application to bind as the LLM deployment's ``server``), with the
    Serve config's options for the ``LLMServer`` deployment (autoscaling, queue bounds) over LLMConfig's."""
    try:
        from ray.serve.llm import LLMConfig, build_llm_deployment
    except ImportError as exc:
        raise RuntimeError(f"{MISSING_EXTRA} ({exc}).") from None
    # one stable name, whatever the model: Serve configs tune it as `LLMServer`
    options = {**(overrides or {}), "name": SERVER_NAME}
    return build_llm_deployment(LLMConfig(**server_config(settings)), override_serve_options=options)


async def stream_completion(
    server: Any, model_id: str, assembled: Assembled, sampling: Sampling
) -> AsyncIterator[GenerationEvent]:
    """Stream one completion of ``assembled``'s prompt ids from the LLMServer; its deltas, then how it ended."""
    from ray.serve.llm.openai_api_models import CompletionRequest

    request = CompletionRequest(
        **vllm.completion_request(model_id, assembled.prompt_ids, assembled.max_tokens, sampling)
    )
    response = server.options(stream=True).completions.remote(request)
    reason: FinishReason = "stop"
    tokens = 0
    try:
        async for chunk in response:
            for piece in vllm.pieces(chunk):
                if piece.text:
                    yield GenerationDelta(text=piece.text)
                if piece.finish_reason is not None:
                    reason = "length" if piece.finish_reason == "length" else "stop"
                if piece.completion_tokens is not None:
                    tokens = piece.completion_tokens
    finally:
        response.cancel()
    yield GenerationEnd(finish_reason=reason, completion_tokens=tokens)

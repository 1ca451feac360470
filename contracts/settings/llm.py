"""Settings of the language model of the ask and chat routes (``KHULUMA_LLM_*``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class LLMSettings(BaseModel):
    """The language model: grounded answers over knowledge bases (`/ask`) and `/v1/chat/completions`."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(
        default=None,
        description="Name registered with `khuluma models pull|add` (e.g. `qwen2.5-0.5b-instruct`), a CTranslate2 "
        "directory or a Hugging Face directory of an instruction-tuned causal language model (with the vLLM engine: "
        "a Hugging Face directory or a model registered with `--backend transformers`). Unset: the ask and chat "
        "routes answer 503 naming this setting, and no LLM replica runs.",
    )
    engine: Literal["ctranslate2", "vllm"] = Field(
        default="ctranslate2",
        description="`ctranslate2`: CTranslate2's generator in the LLM replica (CPU int8, or CUDA). `vllm`: vLLM "
        "through Ray Serve LLM (`ray.serve.llm`, the `vllm` extra, GPUs): the LLM replica keeps the prompt "
        "assembly and hands generation to an LLMServer deployment.",
    )
    deploy: Literal["auto", "always"] = Field(
        default="auto",
        description="`auto`: the LLM deployment runs only when a model is set (here, or as its `user_config`); "
        "without one the ingress answers the 503 itself and no replica costs memory at idle. `always`: deploy it "
        "even without a model, so that a later `serve deploy` naming one in its `user_config` loads it.",
    )
    device: str = Field(default="auto", description="`auto`, `cpu` or `cuda` for the CTranslate2 engine.")
    compute_type: str = Field(
        default="auto",
        description="CTranslate2 compute type of the generator; `auto`: int8 on CPU, int8_float16 on CUDA.",
    )
    threads: int = Field(
        default=0, ge=0, description="CPU threads of the CTranslate2 generator (0: every core of the machine)."
    )
    context_tokens: int = Field(
        default=4096,
        ge=256,
        description="Most tokens of a prompt and its answer together; the model's own window (its "
        "`max_position_embeddings`) caps it. Retrieved passages that do not fit are left out (or cut at a word), "
        "lowest ranked first; a prompt of chat messages that does not fit is 400. Prefill costs CPU time in "
        "proportion: on a CPU keep it small.",
    )
    max_answer_tokens: int = Field(
        default=384,
        ge=1,
        description="Default and greatest number of tokens of one answer (`max_tokens` of a chat completion may "
        "ask for fewer, never more).",
    )
    max_batch_size: int = Field(
        default=8,
        ge=1,
        description="Most generations the CTranslate2 engine decodes together in one batch: requests that arrive "
        "while a batch runs form the next one.",
    )
    batch_wait_ms: float = Field(
        default=20.0,
        ge=0,
        description="How long a new batch waits for more requests to join it, in milliseconds. Requests that arrive "
        "while a batch runs wait for it to end (static batching), so clients that start together should land in one "
        "batch: a few milliseconds against the prefill's hundreds.",
    )
    repetition_penalty: float = Field(
        default=1.1,
        ge=1.0,
        description="CTranslate2's penalty on tokens the answer already holds (1: none). Chosen with "
        "no_repeat_ngram_size on the South African question set (docs/search.md): 1.3 left almost no sentence of "
        "SmolLM2-135M that the check accepts. Loops that still come are cut.",
    )
    no_repeat_ngram_size: int = Field(
        default=4,
        ge=0,
        description="CTranslate2: no n-gram of this many tokens twice in an answer (0: off). 4 stopped every loop of "
        "SmolLM2-135M on the South African question set with the fact recall of 1.1 alone (docs/search.md).",
    )
    languages: list[str] | None = Field(
        default=None,
        description="ISO 639-3 codes of the languages the configured model writes well enough to answer in "
        '(JSON: ["eng", "zul"]). Unset: those the catalogue lists for a model pulled by its short name, else '
        "English only. A question in another language is answered through the translation model when one is "
        "installed, else in English with a warning.",
    )
    min_similarity: float = Field(
        default=0.79,
        ge=0,
        le=1,
        description="Least cosine similarity (question to passage, in the embedding model's space) of a passage an "
        'answer may be grounded on. With none at or above it, the answer is "I don\'t know from these documents." '
        "and no model runs; the model's own instruction refuses the rest. The default is measured for the offline "
        "multilingual-e5-small (docs/search.md, refusal and faithfulness); another embedding model needs its own "
        "value (scripts/eval_ask.py --gate).",
    )
    max_question_chars: int = Field(
        default=2000, ge=1, description="Character limit of an ask question (400 naming `question` over it)."
    )
    vllm_tensor_parallel_size: int = Field(
        default=1, ge=1, description="vLLM engine: GPUs one model replica spans (tensor parallelism)."
    )
    vllm_gpu_memory_utilization: float = Field(
        default=0.85, gt=0, le=1, description="vLLM engine: the fraction of each GPU's memory vLLM may take."
    )
    vllm_max_replicas: int = Field(
        default=1, ge=1, description="vLLM engine: most LLMServer replicas Serve's autoscaler starts (one GPU each)."
    )
    vllm_accelerator_type: str | None = Field(
        default=None, description="vLLM engine: the GPU type the replicas need (Ray's accelerator type, e.g. H100)."
    )
    vllm_engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description='vLLM engine: more arguments of vLLM\'s engine, JSON (e.g. {"dtype": "bfloat16", '
        '"enable_prefix_caching": true}); `max_model_len` comes from `context_tokens`.',
    )

    def answer_languages(self, catalogued: tuple[str, ...] = ()) -> tuple[str, ...]:
        """ISO 639-3 codes the model answers in: the setting, else the catalogue's, else English."""
        return tuple(self.languages) if self.languages else (catalogued or ("eng",))

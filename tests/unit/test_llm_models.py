"""Language models in the catalogue and the registry (``khuluma models ...`` with ``--capability llm``), the app
builder's rule that no LLM replica runs without a model, and the vLLM path's configuration: Ray Serve LLM's own
``LLMConfig`` validates what ``deployments/llm_vllm.py`` would deploy (vLLM itself is not installed here; the GPU
check runs it: ``scripts/bench/gpu_check.sh``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.errors import Unavailable
from contracts.llm import Sampling
from contracts.settings import Settings
from engines.llm import vllm
from engines.llm.tokenizer import ChatTokenizer
from engines.models.catalogue import KNOWN_MODELS, check_licence
from engines.models.install import add_local, pull
from engines.models.registry import ModelError, ModelRegistry, model_format
from engines.models.resolve import resolve
from khuluma.app import default_capabilities, deployment_names
from tests.tools import khuluma_models

ROOT = Path(__file__).resolve().parents[2]


# --- catalogue and registry ----------------------------------------------------------------------------------------


def test_the_catalogue_has_small_instruction_models_and_says_what_inkubalm_is() -> None:
    llms = {name: k for name, k in KNOWN_MODELS.items() if k.capability == "llm"}
    assert len(llms) >= 3
    apache = [k for k in llms.values() if k.licence == "Apache-2.0"]
    assert any(k.hf_id == "Qwen/Qwen2.5-0.5B-Instruct" for k in apache)
    assert all(k.languages and "eng" in k.languages for k in llms.values())
    inkuba = llms["inkubalm-0.4b"]
    assert inkuba.non_commercial and "zul" in inkuba.languages and "2,048-token context" in inkuba.note
    assert "not instruction-tuned" in inkuba.note
    assert llms["qwen2.5-3b-instruct"].non_commercial  # the Qwen research licence
    with pytest.raises(ModelError, match="--accept-licence"):
        check_licence("inkubalm-0.4b", accept_licence=False)


def test_a_non_commercial_language_model_is_not_downloaded_unaccepted(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"CC-BY-NC-4\.0"):
        pull(ModelRegistry(tmp_path), "inkubalm-0.4b")
    assert not (tmp_path / "models" / ".downloads").exists()


def test_add_converts_a_checkpoint_to_int8_with_its_tokenizer(tiny_llm, tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    entry = add_local(registry, tiny_llm.hf, name="tiny-chat", capability="llm")
    path = Path(entry.path)
    assert entry.capability == "llm" and entry.backend == "ctranslate2" and entry.quantization == "int8"
    assert model_format(path) == "ctranslate2"
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"} <= {
        p.name for p in path.iterdir()
    }
    assert json.loads((path / "khuluma_llm.json").read_text()) == {"context_window": 512}
    assert resolve(registry, "tiny-chat", "llm").path == entry.path
    assert ChatTokenizer(path, 4096).context_window == 512
    with pytest.raises(ModelError, match="not installed"):
        resolve(registry, "tiny-chat", "translation")  # registered for llm only


def test_a_short_name_resolves_to_the_model_pulled_under_it(tiny_llm, tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    add_local(
        registry, tiny_llm.ct2, name="qwen2.5-0.5b-instruct", capability="llm", source="Qwen/Qwen2.5-0.5B-Instruct"
    )
    assert resolve(registry, "qwen2.5-0.5b-instruct", "llm").name == "qwen2.5-0.5b-instruct"
    assert resolve(registry, "Qwen/Qwen2.5-0.5B-Instruct", "llm").name == "qwen2.5-0.5b-instruct"


def test_cli_lists_language_models_and_shows_the_licence_first(tiny_llm, tmp_path: Path) -> None:
    added = khuluma_models(tmp_path, "add", str(tiny_llm.hf), "--name", "tiny", "--capability", "llm")
    assert added.returncode == 0, added.stderr + added.stdout
    assert "KHULUMA_LLM_MODEL=tiny" in added.stdout
    listing = khuluma_models(tmp_path, "list", "--capability", "llm")
    assert listing.returncode == 0 and "tiny" in listing.stdout
    assert "qwen2.5-0.5b-instruct" in listing.stdout and "Apache-2.0" in listing.stdout
    assert "nllb" not in listing.stdout  # only language models
    pulled = khuluma_models(tmp_path, "pull", "inkubalm-0.4b", HF_HUB_OFFLINE="1")
    out = " ".join(pulled.stdout.split())
    assert pulled.returncode == 1 and "CC-BY-NC-4.0" in out and "zul" in out and "Could not download" not in out


# --- deployment: no model, no replica --------------------------------------------------------------------------------


def test_no_language_model_means_no_llm_replica() -> None:
    fresh = Settings(_env_file=None)
    assert "llm" not in default_capabilities(fresh) and "LLM" not in deployment_names(fresh)
    configured = fresh.updated({"llm": {"model": "qwen2.5-0.5b-instruct"}})
    assert "llm" in default_capabilities(configured) and "LLM" in deployment_names(configured)
    by_config = default_capabilities(fresh, {"LLM": {"user_config": {"model": "qwen2.5-0.5b-instruct"}}})
    assert "llm" in by_config
    assert "llm" in default_capabilities(fresh.updated({"llm": {"deploy": "always"}}))
    on_gpus = configured.updated({"llm": {"engine": "vllm"}})
    assert {"LLM", "LLMServer"} <= deployment_names(on_gpus)


# --- vLLM through Ray Serve LLM --------------------------------------------------------------------------------------


def test_the_vllm_config_is_what_ray_serve_llm_accepts(tiny_llm) -> None:
    # ray.serve.llm.LLMConfig subclasses this one; the public module imports vLLM's protocol models, this one
    # only needs pyarrow (in the test extra)
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    settings = Settings(
        _env_file=None,
        llm={
            "engine": "vllm",
            "vllm_max_replicas": 3,
            "vllm_accelerator_type": "H100",
            "vllm_engine_kwargs": {"dtype": "bfloat16", "enable_prefix_caching": True},
        },
    ).llm
    kwargs = vllm.llm_config(settings, "tiny-chat", str(tiny_llm.hf), 512)
    config = LLMConfig(**kwargs)  # raises on any field Ray Serve LLM does not know
    assert config.model_loading_config.model_id == "tiny-chat"
    assert config.model_loading_config.model_source == str(tiny_llm.hf)  # a local directory: nothing downloads
    assert config.engine_kwargs["max_model_len"] == 512 and config.engine_kwargs["dtype"] == "bfloat16"
    assert config.engine_kwargs["tensor_parallel_size"] == 1
    assert config.deployment_config["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 3}
    assert config.accelerator_type == "H100"


def test_the_vllm_server_needs_its_extra(tiny_llm, tmp_path: Path) -> None:
    from deployments.llm_vllm import build_server, server_config

    settings = Settings(_env_file=None, data_dir=tmp_path, llm={"engine": "vllm", "model": str(tiny_llm.hf)})
    config = server_config(settings)
    assert config["model_loading_config"]["model_source"] == str(tiny_llm.hf)
    assert config["engine_kwargs"]["max_model_len"] == 512  # the checkpoint's window (under context_tokens)
    try:
        import vllm as _  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match=r"pip install 'khuluma\[vllm\]'"):
            build_server(settings)
    else:  # a machine with vLLM (the GPU check) builds the LLMServer deployment
        assert build_server(settings) is not None


def test_what_the_llm_server_streams_is_read() -> None:
    def event(data: dict) -> str:
        return f"data: {json.dumps(data)}\n\n"

    def choice(text: str, finish: str | None) -> dict:
        return {"index": 0, "text": text, "finish_reason": finish}

    base = {"id": "cmpl-1", "object": "text_completion"}
    chunk = event({**base, "choices": [choice("Sawu", None)]})
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    last = event({**base, "choices": [choice("bona", "length")], "usage": None}) + event(
        {**base, "choices": [], "usage": usage}
    )
    last += "data: [DONE]\n\n"
    pieces = vllm.pieces([chunk, last])  # the LLMServer batches stream chunks into lists
    assert "".join(p.text for p in pieces) == "Sawubona"
    assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]
    assert [p.completion_tokens for p in pieces if p.completion_tokens is not None] == [2]
    with pytest.raises(Unavailable, match="too long"):
        vllm.pieces({"object": "error", "message": "prompt too long", "code": 400})
    request = vllm.completion_request("m", [1, 2, 3], 7, Sampling(temperature=0.2, stop=["\n\n"]))
    assert request["prompt"] == [1, 2, 3] and request["max_tokens"] == 7 and request["stream"] is True
    assert request["stop"] == ["\n\n"] and request["stream_options"] == {"include_usage": True}

"""How a capability's model gets installed: what the model registry, the deployments and the edge all tell an
operator, in the same words."""

from __future__ import annotations

# The model `khuluma models pull` fetches for a capability when none is named.
DEFAULT_MODELS: dict[str, str] = {
    "translation": "facebook/nllb-200-distilled-600M",
    "speech": "csukuangfj2/sherpa-onnx-omnilingual-asr-1600-languages-300M-ctc-int8-2025-11-12",
    "llm": "qwen2.5-0.5b-instruct",
}
# Short names of those defaults in `khuluma models pull`'s catalogue (engines/models/catalogue.py:KNOWN_MODELS).
DEFAULT_SHORT_NAMES: dict[str, str] = {"speech": "omnilingual-ctc-300m"}

# Default models whose licence forbids commercial use: their pull command carries --accept-licence.
NON_COMMERCIAL_DEFAULTS = frozenset({"facebook/nllb-200-distilled-600M"})

# The setting (environment variable) that selects a capability's model.
MODEL_SETTING = {
    "translation": "KHULUMA_TRANSLATION_MODEL",
    "whisper": "KHULUMA_SPEECH_WHISPER_MODEL",
    "ner": "KHULUMA_TEXT_NER_MODEL",
    "sentiment": "KHULUMA_TEXT_SENTIMENT_MODEL",
    "embeddings": "KHULUMA_EMBEDDINGS_MODEL",
    "speech": "KHULUMA_SPEECH_LANGUAGE_MODELS",  # a JSON map: language code -> registered name or directory
    "llm": "KHULUMA_LLM_MODEL",
}


def speech_route(language: str, model: str) -> str:
    """The setting that routes ``language`` to the CTC speech ``model`` (a registered name or a directory)."""
    return f'{MODEL_SETTING["speech"]}=\'{{"{language}": "{model}"}}\''


def install_hint(capability: str = "translation") -> str:
    """The exact commands that install the default model of a capability."""
    if capability == "speech":
        short = DEFAULT_SHORT_NAMES["speech"]
        return (
            f"`khuluma models pull {short}` (needs access to huggingface.co; offline: copy a downloaded directory "
            f"here and run `khuluma models add <dir> --capability speech --name {short}`), then route a language to "
            f"it with {speech_route('zul', short)} and restart or redeploy the service"
        )
    hf_id = DEFAULT_MODELS.get(capability, "<huggingface-id>")
    name = hf_id.rsplit("/", 1)[-1]  # a catalogue short name (qwen2.5-0.5b-instruct) is registered as itself
    setting = MODEL_SETTING[capability]
    accept = " --accept-licence" if hf_id in NON_COMMERCIAL_DEFAULTS else ""
    capability_option = "" if capability == "translation" else f" --capability {capability}"  # add's default
    return (
        f"`khuluma models pull {hf_id}{accept}` (needs access to huggingface.co; offline: copy a downloaded "
        f"directory here and run `khuluma models add <dir> --name {name}{capability_option}`), then set "
        f"{setting}={name} (or `user_config: {{model: {name}}}` of the deployment in configs/serve.yaml) "
        f"and restart or redeploy the service"
    )


# What translation answers (503) and /api/v1/models says while no translation model is installed.
TRANSLATION_NOT_INSTALLED = "No translation model is installed. Install one: " + install_hint("translation") + "."

# What the ask and chat routes answer (503) and /api/v1/models says while no language model is configured.
LLM_NOT_INSTALLED = (
    "No language model is configured (KHULUMA_LLM_MODEL), so knowledge-base answers and chat completions are not "
    "served; knowledge-base search is. Install one: " + install_hint("llm") + "."
)

"""Installing models: :func:`pull` downloads a Hugging Face repository with ``huggingface_hub`` (progress bars on
the terminal) and converts it to CTranslate2 (int8 by default) where CTranslate2 can run it; :func:`add_local`
registers a local CTranslate2 directory as it is, or converts a Hugging Face directory. A CTC speech model is
registered as it is, never converted (CTranslate2 would drop MMS's adapters), once
``engines.models.ctc_layout.inspect`` has validated it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from contracts.errors import Unavailable
from engines.models import ctc_layout
from engines.models.catalogue import KNOWN_MODELS, KnownModel, check_licence
from engines.models.registry import SPEECH, Backend, ModelEntry, ModelError, ModelRegistry, model_format, safe_name

LLM_CONTEXT_FILE = "khuluma_llm.json"  # engines.llm.tokenizer.CONTEXT_FILE

# Files a converted directory keeps from its source (tokenizer, feature extractor), per capability.
COPY_FILES: dict[str, tuple[str, ...]] = {
    "translation": (
        "sentencepiece.bpe.model",
        "spiece.model",  # T5 / MADLAD-400
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ),
    "whisper": ("tokenizer.json", "preprocessor_config.json", "vocabulary.json"),
    # the tokenizer and the chat template (in tokenizer_config.json, or a file of its own in newer repositories)
    "llm": (
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
        "chat_template.jinja",
    ),
}


def convert_to_ctranslate2(
    src: Path, dest: Path, capability: str, quantization: str | None = "int8", force: bool = True
) -> Path:
    """Convert a Hugging Face checkpoint with CTranslate2's TransformersConverter (needs transformers+torch)."""
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError as exc:  # the converter imports transformers and torch
        raise ModelError(
            "Converting a Hugging Face checkpoint to CTranslate2 needs the `transformers` extra: "
            "pip install 'khuluma[transformers]' (or convert elsewhere with ct2-transformers-converter "
            "and `khuluma models add` the result)."
        ) from exc
    copy = [f for f in COPY_FILES.get(capability, ()) if (src / f).is_file()]
    tmp = dest.with_name(dest.name + ".converting")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        TransformersConverter(str(src), copy_files=copy or None).convert(
            str(tmp), quantization=quantization, force=True
        )
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(f"CTranslate2 cannot convert {src}: {exc}") from exc
    if capability == "llm":
        _record_context_window(src, tmp)
    if dest.exists():
        if not force:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ModelError(f"{dest} exists already.")
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


def _record_context_window(src: Path, dest: Path) -> None:
    """A language model's context window (its checkpoint's ``max_position_embeddings``) beside the converted model:
    CTranslate2's own config.json does not keep it (``engines/llm/tokenizer.py`` reads it)."""
    try:
        window = json.loads((src / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return
    if isinstance(window, int) and window > 0:
        (dest / LLM_CONTEXT_FILE).write_text(json.dumps({"context_window": window}) + "\n")


def add_local(
    registry: ModelRegistry,
    path: Path,
    name: str | None = None,
    capability: str = "translation",
    quantization: str | None = "int8",
    convert: bool = True,
    source: str | None = None,
) -> ModelEntry:
    """Register a local directory: CTranslate2 as is; Hugging Face converted into ``models/<name>``.

    With ``convert=False``, or when CTranslate2 has no converter for the architecture, the Hugging Face directory
    is registered for the ``transformers`` backend instead.
    """
    path = Path(path).expanduser().resolve()
    if capability == SPEECH:
        return add_speech(registry, path, name, source)
    fmt = model_format(path)
    if fmt is None:
        raise ModelError(
            f"{path} is neither a CTranslate2 model directory (model.bin + config.json) nor a "
            f"Hugging Face checkpoint (config.json + model weights)."
        )
    name = safe_name(name or path.name)
    source = source or str(path)
    if fmt == "ctranslate2":
        return registry.register(ModelEntry(name, capability, str(path), "ctranslate2", source))
    if convert:
        dest = registry.models_dir / name
        if dest.resolve() == path:
            raise ModelError(f"{path} is where the converted model would go; pass another --name.")
        try:
            convert_to_ctranslate2(path, dest, capability, quantization)
            return registry.register(ModelEntry(name, capability, str(dest), "ctranslate2", source, quantization))
        except ModelError as exc:
            if "No conversion is registered" not in str(exc):
                raise
    return registry.register(ModelEntry(name, capability, str(path), "transformers", source))


def speech_layout(path: Path) -> ctc_layout.Layout:
    """The CTC layout of a speech model directory, or :class:`ModelError` saying what it must hold."""
    try:
        return ctc_layout.inspect(path)
    except Unavailable as exc:
        raise ModelError(exc.detail) from None


def add_speech(registry: ModelRegistry, path: Path, name: str | None = None, source: str | None = None) -> ModelEntry:
    """Register a local CTC speech model as it is (its runtime is the backend); nothing is converted or copied."""
    path = Path(path).expanduser().resolve()
    layout = speech_layout(path)
    entry = ModelEntry(safe_name(name or path.name), SPEECH, str(path), layout.runtime, source or str(path))
    return registry.register(entry)


def _download_patterns(repo_id: str, revision: str | None) -> list[str]:
    """Config, tokenizer (and chat template) and ONE copy of the weights (safetensors preferred over .bin)."""
    from huggingface_hub import HfApi

    files = [s.rfilename for s in HfApi().model_info(repo_id, revision=revision).siblings or []]
    weights = (
        ["*.safetensors", "*.safetensors.index.json"]
        if any(f.endswith(".safetensors") for f in files)
        else ["*.bin", "*.bin.index.json"]
    )
    return ["*.json", "*.model", "*.txt", "*.tiktoken", "*.jinja", *weights]  # .jinja: a chat template's own file


def _listed_files(known: KnownModel, repo_id: str, revision: str | None) -> list[str]:
    """The catalogue entry's files that the repository has (an MMS adapter Meta did not train is simply absent)."""
    from huggingface_hub import HfApi

    present = {s.rfilename for s in HfApi().model_info(repo_id, revision=revision).siblings or []}
    wanted = [f for f in known.files if f in present]
    if "model.safetensors" in known.files and "model.safetensors" not in present and "pytorch_model.bin" in present:
        wanted.append("pytorch_model.bin")
    return wanted


def pull(
    registry: ModelRegistry,
    ref: str,
    name: str | None = None,
    capability: str | None = None,
    quantization: str | None = "int8",
    backend: Backend | None = None,
    revision: str | None = None,
    keep_download: bool = False,
    accept_licence: bool = False,
) -> ModelEntry:
    """Download ``ref`` (a short name of :data:`KNOWN_MODELS` or a Hugging Face id), convert and register it. A
    catalogue model under a non-commercial licence needs ``accept_licence`` (:func:`check_licence`); ``backend``
    unset: the catalogue's (transformers for the NER and sentiment classifiers), else ctranslate2."""
    known = check_licence(ref, accept_licence)
    backend = backend or (known.backend if known and known.backend else "ctranslate2")
    repo_id = known.hf_id if known else ref
    capability = capability or (known.capability if known else "translation")
    if "/" not in repo_id:
        raise ModelError(
            f"Unknown model {ref!r}: give a Hugging Face id (owner/name) or one of {', '.join(KNOWN_MODELS)}."
        )
    # a catalogue model is registered under its short name, which the settings may then name
    name = safe_name(name or (ref if ref in KNOWN_MODELS else repo_id.rsplit("/", 1)[-1]))
    download_dir = registry.models_dir / ".downloads" / safe_name(repo_id.replace("/", "--"))
    try:
        from huggingface_hub import snapshot_download

        if known is not None and known.files:
            patterns = _listed_files(known, repo_id, revision)
        elif capability == SPEECH:  # any other speech repository: no ONNX data files or adapters beyond these
            patterns = [*_download_patterns(repo_id, revision), "*.onnx"]
        else:
            patterns = _download_patterns(repo_id, revision)
        snapshot_download(repo_id, revision=revision, local_dir=download_dir, allow_patterns=patterns)
    except Exception as exc:  # offline, unknown repo, gated repo, disk full ...
        raise ModelError(
            f"Could not download {repo_id} from Hugging Face: {type(exc).__name__}: {str(exc)[:300]}. "
            f"If this machine is offline, download it on a machine with access (`hf download {repo_id} "
            f"--local-dir {name}`), copy the directory here and run `khuluma models add <dir> --name {name}`."
        ) from exc
    if capability == SPEECH:  # used as downloaded: checked, moved under its name, registered with its runtime
        layout = speech_layout(download_dir)
        dest = registry.models_dir / name
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(download_dir, dest)
        return registry.register(ModelEntry(name, SPEECH, str(dest), layout.runtime, repo_id))
    if backend == "transformers":
        dest = registry.models_dir / name
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(download_dir, dest)
        return registry.register(ModelEntry(name, capability, str(dest), "transformers", repo_id))
    entry = add_local(registry, download_dir, name, capability, quantization, convert=True, source=repo_id)
    if entry.backend == "transformers":  # CTranslate2 cannot run it: keep the checkpoint under its name
        dest = registry.models_dir / name
        os.replace(download_dir, dest)
        entry = registry.register(ModelEntry(name, capability, str(dest), "transformers", repo_id))
    elif not keep_download:
        shutil.rmtree(download_dir, ignore_errors=True)
    return entry

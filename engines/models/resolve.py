"""The model a setting names (a registered name, the Hugging Face id of a pulled model, a CTranslate2 directory, a
Hugging Face directory) as a :class:`~engines.models.registry.ModelEntry`. Never downloads."""

from __future__ import annotations

import hashlib
from pathlib import Path

from contracts.installs import install_hint
from engines.models.catalogue import KNOWN_MODELS
from engines.models.install import add_local, speech_layout
from engines.models.registry import SPEECH, Backend, ModelEntry, ModelError, ModelRegistry, model_format, safe_name


def resolve(
    registry: ModelRegistry, ref: str, capability: str = "translation", prefer: Backend = "ctranslate2"
) -> ModelEntry:
    """Find the model a setting names. Never downloads; a Hugging Face directory is converted (once) and
    registered, unless ``prefer`` is ``transformers``."""
    known = KNOWN_MODELS.get(ref)
    entry = registry.get(ref, capability) or (registry.get(known.hf_id, capability) if known else None)
    if entry is not None:
        if model_format(Path(entry.path)) is None:
            raise ModelError(
                f"Model {entry.name!r} is registered at {entry.path}, but no model is there any "
                f"more. Reinstall it: {install_hint(capability)}."
            )
        return entry
    path = Path(ref).expanduser()
    if capability == SPEECH:  # never converted: a CTC directory is used as it is
        layout = speech_layout(path) if path.exists() else None
        if layout is not None:
            return ModelEntry(path.resolve().name, SPEECH, str(path.resolve()), layout.runtime, str(path.resolve()))
    fmt = model_format(path)
    if fmt in ("ctranslate2", "sherpa-onnx") or (fmt == "transformers" and prefer == "transformers"):
        return ModelEntry(path.resolve().name, capability, str(path.resolve()), fmt, str(path.resolve()))
    if fmt == "transformers":
        source = str(path.resolve())
        with registry.conversion_lock():
            for existing in registry.list(capability):  # converted before (maybe by another replica)
                if existing.source == source and model_format(Path(existing.path)):
                    return existing
            name = safe_name(path.resolve().name)
            if registry.get(name) is not None:
                name = f"{name}-{hashlib.sha1(source.encode()).hexdigest()[:8]}"
            return add_local(registry, path, name, capability)
    if path.exists():
        raise ModelError(
            f"{path} is not a model directory (expected a CTranslate2 model.bin or a Hugging Face checkpoint)."
        )
    installed = ", ".join(e.name for e in registry.list(capability)) or "none"
    how = (
        f"`khuluma models pull {ref}`, then restart or redeploy the service"
        if "/" in ref or ref in KNOWN_MODELS
        else install_hint(capability)
    )
    raise ModelError(
        f"Model {ref!r} is not installed (installed {capability} models: {installed}; "
        f"registry {registry.file}). Install it: {how}."
    )

"""``khuluma models pull|add|list|remove``: install models into ``<data_dir>/models`` and register them.

The registry (``<data_dir>/models/registry.json``) is shared by every capability; ``--capability`` says which
one a model serves (translation | whisper | ner | embeddings | llm). Settings and ``configs/serve.yaml`` then name a
model by its registered name.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from contracts.installs import MODEL_SETTING
from contracts.settings import get_settings
from engines.model_registry import (
    CAPABILITIES,
    KNOWN_MODELS,
    KnownModel,
    ModelEntry,
    ModelError,
    ModelRegistry,
    add_local,
    catalogued,
    pull,
)

app = typer.Typer(help="Install and list models (translation, speech, NER, language models).", no_args_is_help=True)
console = Console()


def _registry() -> ModelRegistry:
    return ModelRegistry(get_settings().data_dir)


def _check_capability(capability: str | None) -> None:
    if capability is not None and capability not in CAPABILITIES:
        console.print(f"[red]--capability must be one of {', '.join(CAPABILITIES)}.[/]")
        raise typer.Exit(2)


def _installed(entry: ModelEntry) -> None:
    console.print(
        f"Installed [bold]{entry.name}[/] ({entry.capability}, {entry.backend}"
        f"{', ' + entry.quantization if entry.quantization else ''}) at {entry.path}"
    )
    setting = MODEL_SETTING.get(entry.capability, "the setting")
    console.print(f"Use it: {setting}={entry.name} or, in configs/serve.yaml, `user_config: {{model: {entry.name}}}`.")


@app.command("pull")
def pull_cmd(
    ref: str = typer.Argument(..., help=f"Hugging Face id (owner/name) or one of: {', '.join(KNOWN_MODELS)}."),
    name: str = typer.Option(None, help="Registered name (default: the repository name)."),
    capability: str = typer.Option(
        None, help=f"One of {', '.join(CAPABILITIES)} (default: a catalogue model's own, else translation)."
    ),
    quantization: str = typer.Option("int8", help="CTranslate2 weight type: int8, int8_float16, float16, float32."),
    backend: str = typer.Option("ctranslate2", help="ctranslate2 (convert) or transformers (keep the checkpoint)."),
    revision: str = typer.Option(None, help="Git revision of the repository."),
    keep_download: bool = typer.Option(False, help="Keep the downloaded Hugging Face files after conversion."),
    accept_licence: bool = typer.Option(
        False, "--accept-licence", help="Confirm a non-commercial licence (asked of such catalogue models)."
    ),
) -> None:
    """Download a model from Hugging Face (progress bars), convert it to CTranslate2 and register it. A catalogue
    model's licence is shown before anything is downloaded."""
    _check_capability(capability)
    known = catalogued(ref)
    if known is not None:
        _show_licence(ref, known)
    try:
        entry = pull(
            _registry(),
            ref,
            name=name,
            capability=capability,
            quantization=quantization,
            backend="transformers" if backend == "transformers" else "ctranslate2",
            revision=revision,
            keep_download=keep_download,
            accept_licence=accept_licence,
        )
    except ModelError as exc:
        console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(1) from None
    _installed(entry)


def _show_licence(ref: str, known: KnownModel) -> None:
    use = "no commercial use" if known.non_commercial else "commercial use allowed"
    console.print(f"{ref}: {known.hf_id}, licence [bold]{known.licence}[/] ({use}).", highlight=False)
    if known.published:
        console.print(f"Published quality (its publisher's figures, not measured here): {known.published}")
    if known.languages:
        names = ", ".join(known.languages)
        console.print(f"Answers in (per its publisher): {names}. {known.note}", highlight=False)


@app.command("add")
def add_cmd(
    directory: Path = typer.Argument(..., help="A CTranslate2 model directory or a Hugging Face checkpoint."),
    name: str = typer.Option(None, help="Registered name (default: the directory name)."),
    capability: str = typer.Option("translation", help=f"One of {', '.join(CAPABILITIES)}."),
    quantization: str = typer.Option("int8", help="CTranslate2 weight type when a checkpoint is converted."),
    convert: bool = typer.Option(
        True,
        help="Convert a Hugging Face checkpoint to CTranslate2 (--no-convert: "
        "register it for the transformers backend).",
    ),
) -> None:
    """Register a local model directory (a Hugging Face checkpoint is converted to CTranslate2 first)."""
    _check_capability(capability)
    try:
        entry = add_local(
            _registry(), directory, name=name, capability=capability, quantization=quantization, convert=convert
        )
    except ModelError as exc:
        console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(1) from None
    _installed(entry)


@app.command("list")
def list_cmd(capability: str = typer.Option(None, help="Only this capability.")) -> None:
    """List registered models, and the short names `khuluma models pull` knows."""
    _check_capability(capability)
    registry = _registry()
    try:
        entries = registry.list(capability)
    except ModelError as exc:
        console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(1) from None
    if entries:
        table = Table("name", "capability", "backend", "quantization", "source", "path", "added")
        for e in entries:
            table.add_row(e.name, e.capability, e.backend, e.quantization or "", e.source, e.path, e.added_at)
        console.print(table)
    else:
        console.print(f"No models installed in {registry.models_dir}.")
    known = Table("short name", "Hugging Face id", "capability", "licence", "size", title="Available to pull")
    for short, k in KNOWN_MODELS.items():
        if capability is None or k.capability == capability:
            known.add_row(short, k.hf_id, k.capability, k.licence, k.note)
    console.print(known)


@app.command("remove")
def remove_cmd(
    name: str = typer.Argument(..., help="Registered name."),
    delete_files: bool = typer.Option(False, help="Also delete its files when they are under <data_dir>/models."),
) -> None:
    """Unregister a model."""
    try:
        entry = _registry().remove(name, delete_files=delete_files)
    except ModelError as exc:
        console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(1) from None
    console.print(f"Removed {entry.name}.")

"""``khuluma models pull|add|list|remove``: install models into ``<data_dir>/models`` and register them.

The registry (``<data_dir>/models/registry.json``) is shared by every capability; ``--capability`` says which
one a model serves (translation | whisper | ner | embeddings | sentiment | speech |
llm). Settings and
``configs/serve.yaml`` then name a model by its registered name. A ``speech`` model (CTC: Omnilingual ASR, MMS,
wav2vec2 fine-tunes) is routed per language with ``KHULUMA_SPEECH_LANGUAGE_MODELS='{"zul": "<name>"}'``; after
installing one the command prints that line for each language the model covers.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from contracts.installs import MODEL_SETTING, speech_route
from contracts.settings import get_settings
from engines.models.catalogue import KNOWN_MODELS, KnownModel, catalogued
from engines.models.install import add_local, pull, speech_layout
from engines.models.registry import CAPABILITIES, SPEECH, ModelEntry, ModelError, ModelRegistry

app = typer.Typer(
    help="Install and list models (translation, speech, NER, sentiment, language models).", no_args_is_help=True
)
console = Console()


def _registry() -> ModelRegistry:
    return ModelRegistry(get_settings().data_dir)


def _check_capability(capability: str | None) -> None:
    if capability is not None and capability not in CAPABILITIES:
        console.print(f"[red]--capability must be one of {', '.join(CAPABILITIES)}.[/]")
        raise typer.Exit(2)


def _installed(entry: ModelEntry, known: KnownModel | None = None) -> None:
    console.print(
        f"Installed [bold]{entry.name}[/] ({entry.capability}, {entry.backend}"
        f"{', ' + entry.quantization if entry.quantization else ''}) at {entry.path}",
        highlight=False,
    )
    if entry.capability == SPEECH:
        _speech_routes(entry, known)
        return
    setting = MODEL_SETTING.get(entry.capability, "the setting")
    console.print(f"Use it: {setting}={entry.name} or, in configs/serve.yaml, `user_config: {{model: {entry.name}}}`.")


def _speech_routes(entry: ModelEntry, known: KnownModel | None) -> None:
    """How to route languages to a CTC speech model: one setting line per language it covers."""
    layout = speech_layout(Path(entry.path))
    if layout.adapters:
        languages, why = list(layout.adapters), f"its adapters: {', '.join(layout.adapters)}"
        wanted = [c for c in (known.languages if known else ()) if c not in layout.adapters]
        if wanted:
            console.print(f"The repository has no adapter for: {', '.join(wanted)}.", highlight=False)
    elif layout.agnostic:
        languages = list(known.languages) if known and known.languages else ["zul"]
        why = "language-agnostic; " + (
            f"its publisher lists {', '.join(languages)} among the South African languages"
            if known and known.languages
            else "route the languages it was trained on"
        )
    else:
        languages, why = ["<code>"], "one language: route the language it was fine-tuned for"
    console.print(f"Route languages to it ({why}):", highlight=False)
    routes = ", ".join(f'"{code}": "{entry.name}"' for code in languages)
    console.print(f"  {MODEL_SETTING[SPEECH]}='{{{routes}}}'", highlight=False, markup=False)
    if len(languages) > 1:
        console.print(f"or one language: {speech_route(languages[0], entry.name)}", highlight=False, markup=False)


@app.command("pull")
def pull_cmd(
    ref: str = typer.Argument(..., help=f"Hugging Face id (owner/name) or one of: {', '.join(KNOWN_MODELS)}."),
    name: str = typer.Option(None, help="Registered name (default: the repository name)."),
    capability: str = typer.Option(
        None, help=f"One of {', '.join(CAPABILITIES)} (default: a catalogue model's own, else translation)."
    ),
    quantization: str = typer.Option("int8", help="CTranslate2 weight type: int8, int8_float16, float16, float32."),
    backend: str = typer.Option(
        None,
        help="ctranslate2 (convert) or transformers (keep the checkpoint). Default: the catalogue's (transformers "
        "for the NER and sentiment classifiers), else ctranslate2.",
    ),
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
            backend=None if backend is None else ("transformers" if backend == "transformers" else "ctranslate2"),
            revision=revision,
            keep_download=keep_download,
            accept_licence=accept_licence,
        )
    except ModelError as exc:
        console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(1) from None
    _installed(entry, known)


def _show_licence(ref: str, known: KnownModel) -> None:
    use = "no commercial use" if known.non_commercial else "commercial use allowed"
    console.print(f"{ref}: {known.hf_id}, licence [bold]{known.licence}[/] ({use}).", highlight=False)
    if known.published:
        console.print(f"Published quality (its publisher's figures, not measured here): {known.published}")
    if known.languages:
        names = ", ".join(known.languages)
        if known.capability == "llm":
            console.print(f"Answers in (per its publisher): {names}. {known.note}", highlight=False)
        else:
            console.print(f"Routed to it once configured: {names} (the other languages keep theirs).", highlight=False)


@app.command("add")
def add_cmd(
    directory: Path = typer.Argument(
        ..., help="A CTranslate2 model directory, a Hugging Face checkpoint, or (speech) a CTC model directory."
    ),
    name: str = typer.Option(None, help="Registered name (default: the directory name)."),
    capability: str = typer.Option("translation", help=f"One of {', '.join(CAPABILITIES)}."),
    quantization: str = typer.Option("int8", help="CTranslate2 weight type when a checkpoint is converted."),
    convert: bool = typer.Option(
        True,
        help="Convert a Hugging Face checkpoint to CTranslate2 (--no-convert: "
        "register it for the transformers backend).",
    ),
) -> None:
    """Register a local model directory (a Hugging Face checkpoint is converted to CTranslate2 first; a speech
    model is registered as it is, after its layout is checked: docs/speech.md)."""
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
    known = Table(
        "short name", "Hugging Face id", "capability", "licence", "languages", "size", title="Available to pull"
    )
    for short, k in KNOWN_MODELS.items():
        if capability is None or k.capability == capability:
            known.add_row(short, k.hf_id, k.capability, k.licence, ", ".join(k.languages) or "all its own", k.note)
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

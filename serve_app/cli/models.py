"""`khuluma models ...` (filled in by its capability)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Install and list models (translation, speech, NER).", no_args_is_help=True)

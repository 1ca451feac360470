"""`khuluma batch ...` (filled in by its capability)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Batch transcription helpers (upload files to a batch).", no_args_is_help=True)

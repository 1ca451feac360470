"""The ``khuluma`` command line."""

from __future__ import annotations

import typer

from serve_app.cli import admin, batch, client, models, serve, stream

app = typer.Typer(help="Khuluma: self-hosted language, search and speech API on Ray Serve.", no_args_is_help=True)
app.command("serve")(serve.serve)
app.command("stream")(stream.stream)
app.command("transcribe")(client.transcribe)
app.command("sentiment")(client.sentiment)
app.command("entities")(client.entities)
app.command("language")(client.language)
app.add_typer(client.kb_app, name="kb")
app.add_typer(admin.token_app, name="token")
app.add_typer(admin.db_app, name="db")
app.add_typer(models.app, name="models")
app.add_typer(batch.app, name="batch")


def main() -> None:
    app()

"""The ``khuluma`` command line.

``khuluma serve`` is the one long-running command: its process waits for Ctrl-C for the service's lifetime (a Ray
driver), so it is started with that command alone. The other commands' modules (the ORM, the HTTP and audio
clients: docs/performance.md, figures behind the code) are imported only by the commands that use them.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

HELP = "Khuluma: self-hosted language, search and speech API on Ray Serve."


def build_app() -> typer.Typer:
    """Every command."""
    from khuluma.cli import admin, batch, client, models, qualify, serve, stream

    app = typer.Typer(help=HELP, no_args_is_help=True)
    app.command("serve")(serve.serve)
    app.command("stream")(stream.stream)
    app.command("qualify")(qualify.qualify)
    app.command("transcribe")(client.transcribe)
    app.command("sentiment")(client.sentiment)
    app.command("entities")(client.entities)
    app.command("language")(client.language)
    app.add_typer(client.kb_app, name="kb")
    app.add_typer(admin.token_app, name="token")
    app.add_typer(admin.db_app, name="db")
    app.add_typer(models.app, name="models")
    app.add_typer(batch.app, name="batch")
    return app


def __getattr__(name: str) -> Any:
    """``khuluma.cli.app``: the whole command line, built on first use (tests drive it with CliRunner)."""
    if name == "app":
        app = globals()["app"] = build_app()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        from khuluma.cli import serve

        serving = typer.Typer(help=HELP)
        serving.command()(serve.serve)  # the only command: `khuluma serve [OPTIONS]`
        serving(args=sys.argv[2:], prog_name="khuluma serve")
        return
    build_app()()

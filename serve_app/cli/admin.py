"""``khuluma token ...`` and ``khuluma db ...``."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from contracts.settings import get_settings
from persistence.session import Database, migrate
from serve_app.tokens import create_token, list_tokens, revoke_token, webhook_secret_for

token_app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
console = Console()


def _db() -> Database:
    settings = get_settings()
    settings.ensure_dirs()
    return Database.migrated(settings.db_url)  # a CLI command may be the first thing run on a new machine


def _location(url: str) -> str:
    """The database URL without its credentials (user:password@), for messages."""
    return url.split("@")[-1]


@token_app.command("create")
def token_create(
    customer: str = typer.Option("default", help="Customer the token belongs to (created if new)."),
    project: str = typer.Option("default", help="Project of that customer (created if new)."),
    name: str = typer.Option("", help="A label for the token."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the token."),
) -> None:
    """Create a token. It is shown once and stored only as a hash."""
    token, info = create_token(_db(), customer, project, name)
    if quiet:
        print(token)
        return
    console.print(
        f"Token for customer [bold]{info.customer}[/] (id {info.customer_id}), project "
        f"[bold]{info.project}[/] (id {info.project_id}). Shown once; store it now:"
    )
    print(token)


@token_app.command("list")
def token_list(all_: bool = typer.Option(False, "--all", help="Include revoked tokens.")) -> None:
    """List tokens (prefixes only; the tokens themselves are not stored)."""
    table = Table("id", "prefix", "customer", "project", "name", "created", "revoked")
    for t in list_tokens(_db(), include_revoked=all_):
        table.add_row(
            str(t.id),
            t.prefix,
            f"{t.customer} ({t.customer_id})",
            f"{t.project} ({t.project_id})",
            t.name,
            t.created_at.isoformat(timespec="seconds"),
            t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else "",
        )
    console.print(table)


@token_app.command("revoke")
def token_revoke(ident: str = typer.Argument(..., help="Token id, listed prefix, or the token itself.")) -> None:
    """Revoke a token (running services stop accepting it within the token cache time)."""
    if not revoke_token(_db(), ident):
        console.print(f"[red]No active token matches {ident!r}.[/]")
        raise typer.Exit(1)
    console.print("Revoked.")


@token_app.command("secret")
def token_secret(token_id: int = typer.Argument(..., help="Token id (see `khuluma token list`).")) -> None:
    """Print the token's webhook signing secret (HMAC-SHA256 key of its webhook deliveries; see docs/jobs.md)."""
    secret = webhook_secret_for(_db(), token_id)
    if secret is None:
        console.print(f"[red]No token with id {token_id}.[/]")
        raise typer.Exit(1)
    print(secret)


@db_app.command("migrate")
def db_migrate() -> None:
    """Bring the database schema to the newest version (`khuluma serve` does it too, before anything starts;
    replicas never migrate)."""
    settings = get_settings()
    settings.ensure_dirs()
    migrate(settings.db_url)
    console.print(f"Database at {_location(settings.db_url)} is up to date.")


@db_app.command("prune")
def db_prune(
    older_than: float = typer.Option(
        None, "--older-than", min=0, help="Age in days (default: KHULUMA_JOBS_RETENTION_DAYS, 30)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be removed."),
) -> None:
    """Remove v1 uploads (audio and row) older than the retention period, and stray upload files. Jobs still
    queued or running and webhooks still being delivered are kept. The jobs worker does the same every hour."""
    from cluster.retention import sweep

    settings = get_settings()
    report = sweep(settings, _db(), older_than_days=older_than, dry_run=dry_run)
    for upload_id in report.uploads:
        console.print(f"{'would remove' if dry_run else 'removed'} upload {upload_id}")
    for orphan in report.orphans:
        console.print(f"{'would remove' if dry_run else 'removed'} stray {orphan}")
    console.print(("Would remove " if dry_run else "Removed ") + report.summary() + ".")

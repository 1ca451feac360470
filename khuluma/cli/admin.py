"""``khuluma token ...`` and ``khuluma db ...``."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from contracts.settings import get_settings
from persistence.session import Database, migrate
from serve_app.tokens import (
    LIMIT_FIELDS,
    create_token,
    customer_limits,
    list_tokens,
    revoke_token,
    webhook_secret_for,
)

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


_LIMIT_HELP = (
    "0: unlimited; `default`: the operator's default (KHULUMA_ADMISSION_{}). The customer's, for all its tokens."
)
_RPM = typer.Option(
    None, "--requests-per-minute", metavar="N", help="Requests per minute. " + _LIMIT_HELP.format("REQUESTS_PER_MINUTE")
)
_AUDIO = typer.Option(
    None,
    "--audio-seconds-per-day",
    metavar="N",
    help="Seconds of audio transcribed per UTC day. " + _LIMIT_HELP.format("AUDIO_SECONDS_PER_DAY"),
)
_LIVE = typer.Option(
    None, "--live-sessions", metavar="N", help="Live sessions open at once. " + _LIMIT_HELP.format("LIVE_SESSIONS")
)
_SHARE = typer.Option(
    None,
    "--concurrent-share",
    metavar="PERCENT",
    help="Percent of a server's capacity for one kind of work (text, search, speech, ...) the customer may hold in "
    "flight at once, 1 to 100; past it 429. " + _LIMIT_HELP.format("CONCURRENT_SHARE"),
)


def _limit_changes(**given: str | None) -> dict[str, int | None]:
    """The limits named on the command line: an integer >= 0, or `default` (None: the operator's default)."""
    changes: dict[str, int | None] = {}
    for field, value in given.items():
        if value is None:
            continue
        text = value.strip().lower()
        if text == "default":
            changes[field] = None
        elif text.isdigit() and (field != "concurrent_share" or int(text) <= 100):
            changes[field] = int(text)
        else:
            option = "--" + field.replace("_", "-")
            most = " (a percentage: at most 100)" if field == "concurrent_share" else ""
            raise typer.BadParameter(f"{value!r} is not a number >= 0{most} or `default`", param_hint=option)
    return changes


@token_app.command("create")
def token_create(
    customer: str = typer.Option("default", help="Customer the token belongs to (created if new)."),
    project: str = typer.Option("default", help="Project of that customer (created if new)."),
    name: str = typer.Option("", help="A label for the token."),
    requests_per_minute: str | None = _RPM,
    audio_seconds_per_day: str | None = _AUDIO,
    live_sessions: str | None = _LIVE,
    concurrent_share: str | None = _SHARE,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the token."),
) -> None:
    """Create a token. It is shown once and stored only as a hash. Limits given here are set on the customer."""
    limits = _limit_changes(
        requests_per_minute=requests_per_minute,
        audio_seconds_per_day=audio_seconds_per_day,
        live_sessions=live_sessions,
        concurrent_share=concurrent_share,
    )
    token, info = create_token(_db(), customer, project, name, limits)
    if quiet:
        print(token)
        return
    console.print(
        f"Token for customer [bold]{info.customer}[/] (id {info.customer_id}), project "
        f"[bold]{info.project}[/] (id {info.project_id}). Shown once; store it now:"
    )
    print(token)


@token_app.command("limits")
def token_limits(
    ident: str = typer.Argument(..., help="Token id, listed prefix or token (its customer), or a customer name."),
    requests_per_minute: str | None = _RPM,
    audio_seconds_per_day: str | None = _AUDIO,
    live_sessions: str | None = _LIVE,
    concurrent_share: str | None = _SHARE,
) -> None:
    """Show a customer's limits, changing those given first. Running services apply a change within
    KHULUMA_ADMISSION_CACHE_SECONDS (10 s)."""
    changes = _limit_changes(
        requests_per_minute=requests_per_minute,
        audio_seconds_per_day=audio_seconds_per_day,
        live_sessions=live_sessions,
        concurrent_share=concurrent_share,
    )
    found = customer_limits(_db(), ident, changes)
    if found is None:
        console.print(f"[red]No token or customer matches {ident!r}.[/]")
        raise typer.Exit(1)
    table = Table("limit", "value", "applies")
    defaults = get_settings().admission
    for field in LIMIT_FIELDS:
        own, default = getattr(found, field), getattr(defaults, field)
        applies = _effective(own if own is not None else default, "%" if field == "concurrent_share" else "")
        table.add_row(field, "default" if own is None else str(own), applies)
    console.print(
        f"Limits of customer [bold]{found.customer}[/] (id {found.customer_id}){' (changed)' if changes else ''}:"
    )
    console.print(table)


def _effective(value: int, unit: str = "") -> str:
    return "unlimited" if value == 0 else f"{value}{unit}"


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

"""``khuluma batch ...``: upload a directory into a batch with its upload credential, as any client would.

The credential (``sas_token`` of ``POST /api/v2alpha/transcribe/batch``) carries an S3 POST policy limited to the
batch's prefix; this command POSTs each file to the storage directly (not through the service), several at a
time, with a progress bar. ``khuluma batch env`` prints the temporary keys for aws-cli.
"""

from __future__ import annotations

import io
import mimetypes
import shlex
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from cluster.credentials import UploadToken

app = typer.Typer(help="Batch transcription helpers (upload files to a batch).", no_args_is_help=True)
console = Console(stderr=True)

_TOKEN_HELP = "The batch's sas_token (or set KHULUMA_SAS_TOKEN)."


@dataclass
class UploadResult:
    path: Path
    key: str
    ok: bool
    detail: str = ""


class CountingFile(io.FileIO):
    """A file whose reads report progress (httpx streams multipart bodies by reading in chunks)."""

    def __init__(self, path: Path, on_read: Callable[[int], None]) -> None:
        super().__init__(path, "rb")
        self._on_read = on_read

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size) or b""
        self._on_read(len(data))
        return data


def _s3_error(text: str) -> str:
    """The <Message> of an S3 XML error body, else the body's start."""
    import re

    found = re.search(r"<Message>(.*?)</Message>", text or "", re.S)
    return found.group(1).strip() if found else (text or "").strip()[:300]


def post_url(token: UploadToken, url: str | None = None) -> str:
    """Where files are POSTed: the token's URL, or ``<url>/<bucket>`` when the storage is reached elsewhere."""
    return f"{url.rstrip('/')}/{token['bucket']}" if url else token["post"]["url"]


def upload_file(
    token: UploadToken,
    path: Path,
    key: str,
    *,
    url: str | None = None,
    on_read: Callable[[int], None] = lambda n: None,
    timeout: float = 600.0,
) -> UploadResult:
    """POST one file with the token's policy. ``key`` must start with the batch prefix (the storage checks)."""
    import httpx

    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    fields = {**token["post"]["fields"], "key": key, "Content-Type": content_type}
    body = CountingFile(path, on_read)
    try:
        response = httpx.post(
            post_url(token, url), data=fields, files={"file": (path.name, body, content_type)}, timeout=timeout
        )
    except httpx.HTTPError as exc:
        return UploadResult(path, key, False, f"{type(exc).__name__}: {exc}")
    finally:
        body.close()
    if response.status_code in (200, 201, 204):
        return UploadResult(path, key, True)
    return UploadResult(path, key, False, f"HTTP {response.status_code}: {_s3_error(response.text)}")


def iter_files(directory: Path, pattern: str = "*", recursive: bool = True) -> Iterator[Path]:
    paths = directory.rglob(pattern) if recursive else directory.glob(pattern)
    for path in sorted(paths):
        if path.is_file() and not path.name.startswith("."):
            yield path


def upload_directory(
    token: UploadToken,
    directory: Path,
    *,
    pattern: str = "*",
    recursive: bool = True,
    parallel: int = 4,
    url: str | None = None,
    on_read: Callable[[int], None] = lambda n: None,
    on_done: Callable[[UploadResult], None] = lambda r: None,
) -> list[UploadResult]:
    """Upload every file under ``directory`` to ``<prefix><relative path>``; returns one result per file."""
    files = list(iter_files(directory, pattern, recursive))
    lock = threading.Lock()

    def counted(n: int) -> None:
        with lock:
            on_read(n)

    results: list[UploadResult] = []
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [
            pool.submit(
                upload_file, token, p, token["prefix"] + p.relative_to(directory).as_posix(), url=url, on_read=counted
            )
            for p in files
        ]
        for future in as_completed(futures):
            result = future.result()
            on_done(result)
            results.append(result)
    return sorted(results, key=lambda r: r.key)


def _load_token(token: str | None, batch_id: str | None = None) -> UploadToken:
    from cluster.credentials import decode_token

    if not token:
        console.print("[red]No upload credential:[/] pass --token or set KHULUMA_SAS_TOKEN.")
        raise typer.Exit(2)
    try:
        data = decode_token(token)
    except ValueError as exc:
        console.print(f"[red]Bad --token:[/] {exc}")
        raise typer.Exit(2) from None
    if batch_id and data.get("batch_id") != batch_id:
        console.print(f"[red]This credential belongs to batch {data.get('batch_id')}, not {batch_id}.[/]")
        raise typer.Exit(2)
    expires = datetime.strptime(data["expires_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    if expires <= datetime.now(UTC):
        console.print(f"[red]This upload credential expired at {data['expires_at']}[/]; create a new batch.")
        raise typer.Exit(1)
    return data


@app.command("upload")
def upload(
    batch_id: str = typer.Argument(..., help="The batch_id returned when the batch was created."),
    directory: Path = typer.Argument(..., exists=True, file_okay=False, help="Directory of audio files."),
    token: str = typer.Option(None, "--token", envvar="KHULUMA_SAS_TOKEN", help=_TOKEN_HELP),
    url: str = typer.Option(
        None,
        "--url",
        help="Storage endpoint to use instead of the one in the token "
        "(e.g. when the storage is reached through another address).",
    ),
    pattern: str = typer.Option("*", help="Only files matching this glob."),
    recursive: bool = typer.Option(True, help="Include sub-directories (their paths become part of the name)."),
    parallel: int = typer.Option(4, min=1, max=64, help="Files uploaded at once."),
) -> None:
    """Upload every file of DIRECTORY into the batch (then call .../batch/{batch_id}/process)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    data = _load_token(token, batch_id)
    files = list(iter_files(directory, pattern, recursive))
    if not files:
        console.print(f"[yellow]No files in {directory} match {pattern!r}.[/]")
        raise typer.Exit(1)
    too_big = [p for p in files if p.stat().st_size > data.get("max_file_bytes", float("inf"))]
    if too_big:
        console.print(
            f"[red]{len(too_big)} file(s) exceed the {data['max_file_bytes'] // 2**20} MB limit:[/] "
            + ", ".join(str(p) for p in too_big[:5])
        )
        raise typer.Exit(1)
    total = sum(p.stat().st_size for p in files)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bytes_task = progress.add_task(f"{len(files)} file(s)", total=total)

        def done(result: UploadResult) -> None:
            if not result.ok:
                progress.console.print(f"[red]failed[/] {result.path}: {result.detail}")

        results = upload_directory(
            data,
            directory,
            pattern=pattern,
            recursive=recursive,
            parallel=parallel,
            url=url,
            on_read=lambda n: progress.advance(bytes_task, n),
            on_done=done,
        )
    failed = [r for r in results if not r.ok]
    console.print(
        f"Uploaded {len(results) - len(failed)} of {len(results)} file(s) to "
        f"{data['endpoint']}/{data['bucket']}/{data['prefix']}"
    )
    if failed:
        raise typer.Exit(1)
    console.print(f"Next: POST /api/v2alpha/transcribe/batch/{batch_id}/process")


@app.command("env")
def env(token: str = typer.Option(None, "--token", envvar="KHULUMA_SAS_TOKEN", help=_TOKEN_HELP)) -> None:
    """Print shell exports of the token's temporary S3 keys, for `aws s3 cp` (eval "$(khuluma batch env ...)")."""
    data = _load_token(token)
    creds = data.get("credentials")
    if not creds:
        console.print(
            "[red]This credential carries no temporary keys[/] (the storage does not issue STS "
            "tokens, or the lifetime is under 15 minutes): upload with `khuluma batch upload` or curl."
        )
        raise typer.Exit(1)
    exports = {
        "AWS_ACCESS_KEY_ID": creds["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": creds["secret_access_key"],
        "AWS_SESSION_TOKEN": creds["session_token"],
        "AWS_DEFAULT_REGION": data.get("region", "us-east-1"),
        "AWS_ENDPOINT_URL": data["endpoint"],
        "KHULUMA_BATCH_URI": f"s3://{data['bucket']}/{data['prefix']}",
    }
    for name, value in exports.items():
        print(f"export {name}={shlex.quote(value)}")
    console.print(f'# keys valid until {creds["expires_at"]}; then: aws s3 cp --recursive DIR "$KHULUMA_BATCH_URI"')

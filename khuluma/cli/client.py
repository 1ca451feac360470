"""``khuluma sentiment|entities|language|transcribe|kb ...``: the service from a terminal, no curl needed.

Each command calls the HTTP API as any client would, against ``--url`` (or ``KHULUMA_URL``; a remote service
works the same) with ``--token`` (or ``KHULUMA_TOKEN``), and prints a table; ``--json`` prints the service's JSON
answer as it came. Uploads show a progress bar. An error answer prints the service's one-line ``detail`` and its
status, and exits 1.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from khuluma.cli.batch import CountingFile

out = Console()
err = Console(stderr=True)

URL = typer.Option("http://127.0.0.1:8000", "--url", envvar="KHULUMA_URL", help="The service's base URL.")
TOKEN = typer.Option(..., "--token", envvar="KHULUMA_TOKEN", help="Your token (X-CLIENT-TOKEN).")
AS_JSON = typer.Option(False, "--json", help="Print the service's JSON answer instead of a table.")

kb_app = typer.Typer(help="Knowledge bases: create, upload documents, query, list, delete.", no_args_is_help=True)


def _call(method: str, url: str, token: str, path: str, timeout: float = 600.0, **kwargs: Any) -> Any:
    """One request; the JSON answer, or exit 1 with the service's detail."""
    import httpx

    try:
        response = httpx.request(
            method, url.rstrip("/") + path, headers={"X-CLIENT-TOKEN": token}, timeout=timeout, **kwargs
        )
    except httpx.HTTPError as exc:
        err.print(f"[red]Cannot reach {url}: {exc}[/red]")
        raise typer.Exit(1) from None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text[:300]
        err.print(f"[red]{response.status_code}: {detail}[/red]")
        raise typer.Exit(1)
    return response.json()


@contextmanager
def _upload(path: Path) -> Iterator[CountingFile]:
    """The file opened for an upload, with a progress bar on stderr."""
    if not path.is_file():
        err.print(f"[red]No such file: {path}[/red]")
        raise typer.Exit(2)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(path.name, total=path.stat().st_size)
        with CountingFile(path, lambda n: progress.advance(task, n)) as f:
            yield f


def _mime(path: Path) -> str:
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def _show(answer: Any, as_json: bool, table: Table | None = None, text: str | None = None) -> None:
    if as_json:
        print(json.dumps(answer, ensure_ascii=False, indent=1))
        return
    if text is not None:
        out.print(text, highlight=False)
    if table is not None and table.row_count:
        out.print(table)


def _table(*columns: str) -> Table:
    table = Table(show_edge=False)
    for column in columns:
        table.add_column(column)
    return table


# --- text --------------------------------------------------------------------------------------------------------


def sentiment(
    text: str = typer.Argument(..., help="The text."), url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """Sentiment of each sentence."""
    answer = _call("POST", url, token, "/api/v1/sentiment_analysis/process", json={"encoded_text": text})
    table = _table("sentence", "sentiment", "score")
    for sentence in answer["Sentiments"]:
        best = max(sentence["sentiment"], key=lambda s: s["score"])
        table.add_row(sentence["text"], best["label"], f"{best['score']:.2f}")
    _show(answer, as_json, table)


def entities(
    text: str = typer.Argument(..., help="The text."), url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """Named entities (people, places, organisations, dates...)."""
    answer = _call("POST", url, token, "/api/v1/entity_recognition/process", json={"encoded_text": text})
    table = _table("entity", "type", "characters")
    for entity in answer:
        table.add_row(entity["word"], entity["entity"], f"{entity['start']}-{entity['end']}")
    _show(answer, as_json, table, None if answer else "(no entities)")


def language(
    text: str = typer.Argument(..., help="The text."), url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """The text's language, with the other candidates."""
    answer = _call("POST", url, token, "/api/v1/language/detect", json={"text": text})
    table = _table("language", "NLLB code", "score")
    for candidate in answer["candidates"]:
        table.add_row(candidate["language"], candidate["nllb_code"], f"{candidate['score']:.2f}")
    _show(answer, as_json, table, f"{answer['language']} ({answer['confidence']:.2f})")


# --- speech ------------------------------------------------------------------------------------------------------


def transcribe(
    file: Path = typer.Argument(..., help="An audio file."),
    lang: str | None = typer.Option(None, "--lang", help="Language code (default: detected)."),
    diarise: bool = typer.Option(False, "--diarise", help="Who spoke when."),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Transcribe a file (synchronously; the service answers within its sync limit)."""
    params: dict[str, Any] = {"diarise": diarise, **({"lang_code": lang} if lang else {})}
    with _upload(file) as f:
        answer = _call(
            "POST",
            url,
            token,
            "/api/v2alpha/transcribe/sync/file",
            params=params,
            files={"file": (file.name, f, _mime(file))},
        )
    turns = answer.get("diarisation_result") or {}
    table = _table("start", "end", "speaker", "words")
    for start, end, speaker, words in zip(
        turns.get("starts", []), turns.get("ends", []), turns.get("speaker_ids", []), turns.get("words", [])
    ):
        table.add_row(f"{start:.2f}", f"{end:.2f}", str(speaker), str(words))
    summary = f"[dim]{answer.get('audio_length_seconds', 0):.1f} s, language {answer.get('language_code') or '?'}[/dim]"
    _show(answer, as_json, table if diarise else None, answer.get("transcription_text", ""))
    if not as_json:
        err.print(summary)


# --- knowledge bases -----------------------------------------------------------------------------------------------


@kb_app.command("create")
def kb_create(
    name: str = typer.Argument(..., help="A name for it."), url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """Create a knowledge base; prints its id."""
    answer = _call("POST", url, token, "/api/v1/search/knowledgebase", json={"knowledgebase_name": name})
    _show(answer, as_json, text=answer["id"])


@kb_app.command("list")
def kb_list(url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON) -> None:
    """Your knowledge bases and their documents."""
    answer = _call("GET", url, token, "/api/v1/search/knowledgebases")
    table = _table("id", "name", "documents")
    for kb in answer:
        table.add_row(kb["id"], kb["knowledgebase_name"], ", ".join(d["filename"] for d in kb["documents"]))
    _show(answer, as_json, table, None if answer else "(no knowledge bases)")


@kb_app.command("upload")
def kb_upload(
    kb_id: str = typer.Argument(..., help="The knowledge base's id."),
    files: list[Path] = typer.Argument(..., help="Documents (.txt, .md, .pdf, .docx, .html)."),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Upload documents; each is searchable when its upload returns."""
    answers = []
    for path in files:
        with _upload(path) as f:
            answers.append(
                _call(
                    "POST",
                    url,
                    token,
                    f"/api/v1/search/knowledgebase/{kb_id}/document",
                    files={"file": (path.name, f, _mime(path))},
                )
            )
    table = _table("document id", "file", "note")
    for answer in answers:
        table.add_row(answer["id"], answer["filename"], "already there" if answer.get("duplicate") else "")
    _show(answers, as_json, table)


@kb_app.command("query")
def kb_query(
    kb_id: str = typer.Argument(..., help="The knowledge base's id."),
    text: str = typer.Argument(..., help="The question."),
    top_k: int = typer.Option(5, "--top-k", help="How many passages."),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """The passages that answer a question best, with their scores."""
    answer = _call(
        "POST", url, token, f"/api/v1/search/knowledgebase/{kb_id}/query", json={"query": text, "top_k": top_k}
    )
    table = _table("score", "file", "passage")
    for hit in answer["search_result"]:
        table.add_row(f"{hit['score']:.2f}", hit.get("filename") or "", hit["text"])
    _show(answer, as_json, table, None if answer["search_result"] else "(nothing found)")


@kb_app.command("delete")
def kb_delete(
    kb_id: str = typer.Argument(..., help="The knowledge base's id."),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Delete a knowledge base and its documents."""
    answer = _call("DELETE", url, token, f"/api/v1/search/knowledgebase/{kb_id}")
    _show(answer, as_json, text=answer.get("message", "deleted"))

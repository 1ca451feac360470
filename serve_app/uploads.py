"""Streaming multipart uploads to disk with a size limit (413 before the rest is read)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import anyio
from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from contracts.errors import InvalidInput, TooLarge, UnsupportedMedia


@dataclass
class SavedUpload:
    path: Path
    filename: str
    size: int
    content_type: str | None
    fields: dict[str, list[str]] = field(default_factory=dict)  # the body's text parts, by name, in order

    def first(self, name: str) -> str | None:
        """The first text part called ``name`` (None when absent)."""
        values = self.fields.get(name)
        return values[0] if values else None

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


def sanitize_filename(name: str | None, default: str = "upload") -> str:
    """Keep only the base name, letters, digits, '.', '-', '_' and spaces; never empty, never hidden."""
    name = unicodedata.normalize("NFC", (name or "").replace("\\", "/").split("/")[-1])
    name = _UNSAFE.sub("_", name).strip(" .")
    return (name or default)[:200]


def multipart_openapi(field: str, description: str = "The file to upload.") -> dict[str, Any]:
    """OpenAPI for a route that parses its multipart body itself (so it can stream and enforce limits)."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": [field],
                        "properties": {field: {"type": "string", "format": "binary", "description": description}},
                    }
                }
            },
        }
    }


async def _limited_stream(request: Request, limit: int):
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise TooLarge(f"Upload exceeds the limit of {limit // (1024 * 1024)} MB.")
        yield chunk


async def receive_file(request: Request, field: str, limit_bytes: int, dest_dir: Path) -> SavedUpload:
    """Parse a multipart body, spool the file part ``field`` to ``dest_dir``; the text parts are kept in
    ``fields`` (other file parts are ignored)."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise UnsupportedMedia(f"Expected a multipart/form-data body with a '{field}' file part.")
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > limit_bytes + 64 * 1024:
        raise TooLarge(f"Upload exceeds the limit of {limit_bytes // (1024 * 1024)} MB.")
    parser = MultiPartParser(
        request.headers, _limited_stream(request, limit_bytes + 64 * 1024), max_files=4, max_fields=32
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidInput(f"Malformed multipart body: {exc.message}") from None
    try:
        part = form.get(field)
        if not isinstance(part, UploadFile):
            raise InvalidInput(f"Invalid request: field '{field}' is required (a file part).")
        await part.seek(0)
        tmp, size = await anyio.to_thread.run_sync(_spool, part.file, dest_dir)  # up to 1 GB: off the event loop
        if size > limit_bytes:
            await anyio.to_thread.run_sync(functools.partial(tmp.unlink, missing_ok=True))
            raise TooLarge(f"Upload exceeds the limit of {limit_bytes // (1024 * 1024)} MB.")
        texts: dict[str, list[str]] = {}
        for name, value in form.multi_items():
            if isinstance(value, str):
                texts.setdefault(name, []).append(value)
        return SavedUpload(tmp, sanitize_filename(part.filename), size, part.content_type, texts)
    finally:
        await form.close()


def _spool(source: BinaryIO, dest_dir: Path) -> tuple[Path, int]:
    """Copy a spooled multipart part to a new file in ``dest_dir``; its path and size."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix="up-")
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(source, out, 1024 * 1024)
        return Path(tmp), out.tell()

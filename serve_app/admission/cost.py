"""What a model-bound request costs, known before it runs: only the headers are read, except for speech.

The size of a text, a query or a document is its ``Content-Length`` (a request's fixed work counts as
:attr:`~serve_app.admission.kinds.Kind.overhead` more); a transcription's is the seconds of audio its file's header
states (``contracts/audio_length.py``), from the first bytes of the upload, read only once the capacity check has
passed (:func:`audio_in_body`) and handed on to the route unchanged.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

from starlette.types import Message, Receive

from contracts.audio_length import FALLBACK_BYTES_PER_S, HEAD_BYTES, audio_seconds
from serve_app.admission.kinds import Kind


def content_length(headers: Mapping[bytes, bytes]) -> int | None:
    value = headers.get(b"content-length", b"")
    return int(value) if value.isdigit() else None


def header_cost(kind: Kind, headers: Mapping[bytes, bytes], typical: float) -> float:
    """The cost the headers say: the body's size (speech: at a compressed speech bit rate) plus the fixed work;
    ``typical`` when the body's size is not known (a chunked upload)."""
    length = content_length(headers)
    if length is None:
        return typical or kind.overhead
    return kind.overhead + (length / FALLBACK_BYTES_PER_S if kind.audio else length)


async def audio_in_body(receive: Receive, headers: Mapping[bytes, bytes]) -> tuple[float | None, Receive]:
    """Seconds of audio in the upload (multipart, or the v1 routes' JSON with a base64 ``audio_blob``) from its first
    :data:`~contracts.audio_length.HEAD_BYTES`, and a ``receive`` that hands the app the whole body as if nothing
    had been read. None when no file is found there."""
    held: list[Message] = []
    head = b""
    more = True
    while more and len(head) < HEAD_BYTES + 4096:
        message = await receive()
        held.append(message)
        if message["type"] != "http.request":
            break
        head += message.get("body", b"")
        more = bool(message.get("more_body", False))
    total = content_length(headers) or len(head)
    seconds = _audio_seconds(head, total, headers.get(b"content-type", b""))

    async def replay() -> Message:
        return held.pop(0) if held else await receive()

    return seconds, replay


def _audio_seconds(head: bytes, total: int, content_type: bytes) -> float | None:
    if content_type.lower().startswith(b"multipart/"):
        start = _multipart_file(head)
        if start is None:
            return None
        return audio_seconds(head[start : start + HEAD_BYTES], total - start)
    blob = re.search(rb'"audio_blob"\s*:\s*"', head)
    if blob is None:
        return None
    encoded = head[blob.end() :].split(b'"', 1)[0][: HEAD_BYTES * 4 // 3]
    try:
        file_head = base64.b64decode(encoded[: len(encoded) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    return audio_seconds(file_head, (total - blob.end()) * 3 // 4)


def _multipart_file(head: bytes) -> int | None:
    """Where the first file part's bytes start in a multipart body's head."""
    named = head.lower().find(b"filename=")
    if named < 0:
        return None
    end = head.find(b"\r\n\r\n", named)
    return end + 4 if end >= 0 else None

"""Document extraction with bounded time and memory: :func:`extract_text_isolated` runs
:func:`engines.search.documents.extract_text` in a child process (forkserver: the parsers are imported once, each
document gets a fresh, single-use child) with an ``RLIMIT_AS`` address-space cap, and kills it past the time limit.
A runaway parse therefore costs at most the time limit and the memory cap, and is answered with :class:`TooLarge`
(413) naming the limit, never a 500 or a stuck replica.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from contracts.errors import DomainError, TooLarge, UnsupportedMedia
from engines.search.documents import DEFAULT_LIMITS, ExtractedText, ExtractionLimits, extract_text, megabytes

log = logging.getLogger(__name__)


def extract_text_isolated(
    path: Path, filename: str, content_type: str | None = None, limits: ExtractionLimits | None = None
) -> ExtractedText:
    """:func:`extract_text` in a single-use child process with an address-space cap (``limits.memory_bytes``),
    killed after ``limits.timeout_seconds``: a runaway parse costs bounded time and memory and answers
    :class:`TooLarge` (or the child's own domain error), never takes the caller down."""
    limits = limits or DEFAULT_LIMITS
    receive, send = multiprocessing.Pipe(duplex=False)
    child = _context().Process(
        target=_extract_in_child, args=(send, str(path), filename, content_type, limits), daemon=True
    )
    started = time.monotonic()
    child.start()
    send.close()  # the child holds the only writing end: EOF when it dies
    try:
        outcome: tuple[str, Any] | None = None
        if receive.poll(limits.timeout_seconds):
            try:
                outcome = receive.recv()
            except EOFError:  # the child died without an answer (killed by the memory cap, a crash)
                outcome = None
        else:
            child.kill()
            raise TooLarge(
                f"Reading the document '{filename}' took longer than {limits.timeout_seconds:g} s, the limit for "
                "one document: it is too large or too complex once expanded."
            )
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
        receive.close()
    log.debug("extracted %s in a child in %.3f s", filename, time.monotonic() - started)
    if outcome is None:
        raise TooLarge(
            f"Reading the document '{filename}' stopped the reader (exit code {child.exitcode}): it needs more "
            f"than the {megabytes(limits.memory_bytes)} one document may use, or it is not a readable document."
        )
    status, value = outcome
    if status == "ok":
        return ExtractedText(*value)
    raise value


_context_lock = threading.Lock()
_mp_context: Any = None


def _context() -> Any:
    """The forkserver context (a clean server process that imports the parsers once; never ``fork`` from a
    threaded replica). Each document still gets its own child, forked from that server and used once."""
    global _mp_context
    with _context_lock:
        if _mp_context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(
                [
                    "engines.search.documents",
                    "engines.search.isolation",
                    "pypdf",
                    "docx",
                    "html2text",
                    "charset_normalizer",
                ]
            )
            _mp_context = ctx
        return _mp_context


def _extract_in_child(
    send: Connection, path: str, filename: str, content_type: str | None, limits: ExtractionLimits
) -> None:
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        result = extract_text(Path(path), filename, content_type, limits)
        send.send(("ok", (result.text, result.kind, result.mime_type)))
    except DomainError as exc:
        send.send(("error", exc))
    except MemoryError:
        send.send(
            (
                "error",
                TooLarge(f"The document '{filename}' needs too much memory to read (it is too large once expanded)."),
            )
        )
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        send.send(("error", UnsupportedMedia(f"Could not read '{filename}': {type(exc).__name__}: {str(exc)[:200]}")))
    finally:
        send.close()

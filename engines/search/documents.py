"""Plain text out of uploaded documents: .txt .md .pdf .docx .html .csv .json (.jsonl).

The format is chosen from the file name's extension, then the declared content type, then the first bytes
(``%PDF``, a zip holding ``word/document.xml``, ``<html``). Extraction uses maintained libraries: pypdf,
python-docx, html2text, charset-normalizer for text encodings; CSV and JSON use the standard library.

Errors: a format we do not read, or a file the parser cannot read -> :class:`UnsupportedMedia`; a readable file
without any text (e.g. a scanned PDF without a text layer) -> :class:`contracts.search.EmptyDocument`, an
:class:`InvalidInput` whose message the service completes with the request field; a document past one of the
:class:`ExtractionLimits` -> :class:`TooLarge`.

Hostile documents ("bombs"): a small upload can expand enormously (a .docx of kilobytes holding gigabytes of XML,
a PDF whose page tree lists 100,000 pages: docs/search.md). Extraction is bounded four ways
(:class:`ExtractionLimits`, the ``search.extract_*`` settings):

- uncompressed bytes: any zip-based file (.docx, or a zip sniffed from its first bytes) has the sizes its
  central directory declares summed, and every member is then decompressed once, counting the bytes actually
  produced, before any parser sees it;
- pages: the PDF's declared ``/Count`` and the pages actually walked;
- characters: the text extracted so far, checked while reading;
- wall time and memory: ``engines/search/isolation.py`` runs :func:`extract_text` in a single-use child process
  with an address-space cap, killed past the time limit.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.errors import InvalidInput, TooLarge, UnsupportedMedia
from contracts.search import EmptyDocument
from contracts.settings import SearchSettings

log = logging.getLogger(__name__)
MB = 1 << 20
MAX_ZIP_MEMBERS = 10_000  # a real .docx has tens of parts

SUPPORTED_EXTENSIONS: dict[str, str] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
_MIME_KINDS: dict[str, str] = {
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/csv": "csv",
    "text/tab-separated-values": "csv",
    "application/json": "json",
    "application/x-ndjson": "jsonl",
    "application/jsonl": "jsonl",
}
MIME_TYPES: dict[str, str] = {
    "text": "text/plain",
    "markdown": "text/markdown",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "csv": "text/csv",
    "json": "application/json",
    "jsonl": "application/x-ndjson",
}
SUPPORTED_LABEL = ".txt, .md, .pdf, .docx, .html, .csv, .json"


@dataclass(frozen=True)
class ExtractedText:
    text: str
    kind: str  # text | markdown | pdf | docx | html | csv | json | jsonl
    mime_type: str


@dataclass(frozen=True)
class ExtractionLimits:
    """Bounds on one document's extraction (the ``search.extract_*`` settings; see the module doc)."""

    max_expanded_bytes: int
    max_pages: int
    max_chars: int
    timeout_seconds: float
    memory_bytes: int

    @classmethod
    def from_settings(cls, search: SearchSettings) -> ExtractionLimits:
        return cls(
            max_expanded_bytes=int(search.extract_max_expanded_mb * MB),
            max_pages=search.extract_max_pages,
            max_chars=search.extract_max_chars,
            timeout_seconds=search.extract_timeout_seconds,
            memory_bytes=search.extract_memory_mb * MB,
        )


DEFAULT_LIMITS = ExtractionLimits.from_settings(SearchSettings())


def megabytes(size: float) -> str:
    return f"{size / MB:.0f} MB" if size >= 10 * MB else f"{size / MB:.1f} MB"


class _Budget:
    """Characters extracted so far; :class:`TooLarge` past ``limit``."""

    def __init__(self, limit: int, filename: str) -> None:
        self.limit, self.used, self.filename = limit, 0, filename

    def add(self, text: str) -> str:
        self.used += len(text)
        if self.used > self.limit:
            raise TooLarge(
                f"The document '{self.filename}' yields more than {self.limit:,} characters of text, the most "
                "one document may hold. Split it into smaller documents."
            )
        return text


def detect_kind(filename: str, content_type: str | None, head: bytes) -> str:
    """The document format, or 415 naming what is accepted."""
    suffix = Path(filename).suffix.lower()
    if suffix in SUPPORTED_EXTENSIONS:
        return SUPPORTED_EXTENSIONS[suffix]
    mime = (content_type or "").split(";")[0].strip().lower()
    if mime in _MIME_KINDS:
        return _MIME_KINDS[mime]
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"PK\x03\x04") and suffix in ("", ".bin"):
        return "docx"  # confirmed (or refused) when the archive is opened
    sniff = head[:512].lstrip().lower()
    if sniff.startswith((b"<!doctype html", b"<html")):
        return "html"
    if not suffix and _looks_like_text(head):
        return "text"
    shown = suffix or mime or "unknown type"
    raise UnsupportedMedia(f"Unsupported document type ({shown}). Supported: {SUPPORTED_LABEL}.")


def extract_text(
    path: Path, filename: str, content_type: str | None = None, limits: ExtractionLimits | None = None
) -> ExtractedText:
    """Extract the text of a document saved at ``path`` (``filename`` is the name the client gave), in this
    process, within ``limits`` except time and memory (``engines.search.isolation.extract_text_isolated`` adds
    those)."""
    limits = limits or DEFAULT_LIMITS
    with open(path, "rb") as fh:
        head = fh.read(4096)
    kind = detect_kind(filename, content_type, head)
    reader = _READERS[kind]
    budget = _Budget(limits.max_chars, filename)
    try:
        if head.startswith(b"PK\x03\x04") or kind == "docx":
            _check_zip(path, filename, limits)
        text = reader(path, limits, budget)
    except (UnsupportedMedia, InvalidInput, TooLarge):
        raise
    except MemoryError:
        raise _out_of_memory(filename) from None
    except Exception as exc:  # noqa: BLE001 - any parser failure means "we cannot read this file"
        raise UnsupportedMedia(
            f"Could not read '{filename}' as {kind.upper()}: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    budget.used = 0
    text = budget.add(normalise_whitespace(text))
    if not text.strip():
        hint = " (a scanned PDF without a text layer? OCR is not supported)" if kind == "pdf" else ""
        raise EmptyDocument(f"the document '{filename}' contains no text{hint}.")
    return ExtractedText(text=text, kind=kind, mime_type=MIME_TYPES[kind])


def _out_of_memory(filename: str) -> TooLarge:
    return TooLarge(f"The document '{filename}' needs too much memory to read: it is too large once expanded.")


def _check_zip(path: Path, filename: str, limits: ExtractionLimits) -> None:
    """Refuse a zip archive that expands past ``limits.max_expanded_bytes``: first by the sizes it declares, then
    by the bytes its members actually decompress to (streamed, stopping at the limit; a member that decompresses
    to more or less than it declares fails its CRC check -> 415)."""
    if not zipfile.is_zipfile(path):
        if Path(filename).suffix.lower() == ".docx":
            raise UnsupportedMedia("Not a .docx file (not a zip archive; old binary .doc is not supported).")
        return
    cap = limits.max_expanded_bytes

    def too_large(size: str) -> TooLarge:
        return TooLarge(
            f"The document '{filename}' expands to {size} once decompressed; the limit is {megabytes(cap)} "
            "(a compressed archive that expands this much is refused)."
        )

    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise UnsupportedMedia(f"The archive '{filename}' has {len(infos):,} members; a document has far fewer.")
        declared = sum(info.file_size for info in infos)
        if declared > cap:
            raise too_large(megabytes(declared))
        actual = 0
        for info in infos:
            with zf.open(info) as member:
                while chunk := member.read(MB):
                    actual += len(chunk)
                    if actual > cap:
                        raise too_large(f"more than {megabytes(cap)}")


# --- readers ------------------------------------------------------------------------------------------------


def _looks_like_text(data: bytes) -> bool:
    if not data:
        return True
    return not (b"\x00" in data and not data.startswith((b"\xff\xfe", b"\xfe\xff")))


def decode_bytes(data: bytes) -> str:
    """Decode text of unknown encoding: BOMs, UTF-8, then charset-normalizer's best guess."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if b"\x00" in data[:8192]:
        raise UnsupportedMedia("The file is binary, not text.")
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        raise UnsupportedMedia("The file's text encoding could not be recognised.")
    # Short Latin texts fit several code pages equally well; Windows-1252 is what Southern African
    # (Afrikaans, English, Bantu-language) legacy files use, so it wins a tie.
    tied = [m for m in matches if m.chaos == best.chaos and m.coherence == best.coherence]
    if any(m.encoding == "cp1252" for m in tied):
        return data.decode("cp1252", errors="replace")
    return str(best)


def _read_text(path: Path, limits: ExtractionLimits | None = None, budget: _Budget | None = None) -> str:
    data = path.read_bytes()
    if not _looks_like_text(data[:8192]):
        raise UnsupportedMedia("The file is binary, not text.")
    return decode_bytes(data)


def _read_pdf(path: Path, limits: ExtractionLimits, budget: _Budget) -> str:
    from pypdf import PdfReader

    reader = PdfReader(str(path))
    if reader.is_encrypted and not reader.decrypt(""):
        raise UnsupportedMedia("The PDF is password-protected.")

    def too_many(count: str) -> TooLarge:
        return TooLarge(
            f"The PDF '{budget.filename}' has {count} pages; the limit is {limits.max_pages:,} pages per document. "
            "Split it into smaller documents."
        )

    root: Any = reader.trailer["/Root"].get_object()
    declared = root["/Pages"].get_object().get("/Count", 0)
    if isinstance(declared, int) and declared > limits.max_pages:
        raise too_many(f"{declared:,}")
    pages: list[str] = []
    for number, page in enumerate(_walk_pages(reader, root.raw_get("/Pages")), 1):
        if number > limits.max_pages:
            raise too_many(f"more than {limits.max_pages:,}")
        pages.append(budget.add((page.extract_text() or "").strip()))
    return "\n\n".join(p for p in pages if p)


_INHERITED = ("/Resources", "/MediaBox", "/CropBox", "/Rotate")


def _walk_pages(reader: Any, root: Any) -> Iterator[Any]:
    """The leaf pages of a page tree, depth first and lazily, with the attributes they inherit (pypdf's
    ``reader.pages`` flattens the whole tree first, however many pages it lists); a node seen twice is skipped."""
    from pypdf import PageObject

    seen: set[int] = set()
    stack: list[tuple[Any, dict[str, Any]]] = [(root, {})]
    while stack:
        ref, inherited = stack.pop()
        key = getattr(ref, "idnum", None)
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        node = ref.get_object()
        if "/Kids" in node:
            passed = dict(inherited)
            passed.update({name: node[name] for name in _INHERITED if name in node})
            stack.extend((kid, passed) for kid in reversed(list(node["/Kids"])))
            continue
        page = PageObject(reader, ref if key is not None else None)
        page.update(node)
        for name, value in inherited.items():
            if name not in page:
                page[name] = value
        yield page


def _read_docx(path: Path, limits: ExtractionLimits, budget: _Budget) -> str:
    if not zipfile.is_zipfile(path):
        raise UnsupportedMedia("Not a .docx file (not a zip archive; old binary .doc is not supported).")
    with zipfile.ZipFile(path) as zf:
        if "word/document.xml" not in zf.namelist():
            raise UnsupportedMedia("Not a .docx file (the archive has no word/document.xml).")
    import docx

    document = docx.Document(str(path))
    blocks: list[str] = [budget.add(p.text) for p in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            cells: list[str] = []
            for cell in row.cells:
                value = cell.text.strip()
                if value and (not cells or cells[-1] != value):  # merged cells repeat their text
                    cells.append(value)
            blocks.append(budget.add(" | ".join(cells)))
    return "\n\n".join(b.strip() for b in blocks if b.strip())


def _read_html(path: Path, limits: ExtractionLimits, budget: _Budget) -> str:
    import html2text

    converter = html2text.HTML2Text()
    converter.ignore_links = True
    converter.ignore_images = True
    converter.ignore_emphasis = True
    converter.body_width = 0  # no hard wrapping: keep sentences on one line
    text = converter.handle(_read_text(path, limits, budget))
    return re.sub(r"^\s{0,3}#{1,6}\s+", "", text, flags=re.MULTILINE)  # headings as plain lines


def _read_markdown(path: Path, limits: ExtractionLimits, budget: _Budget) -> str:
    return _read_text(path, limits, budget)


def _read_csv(path: Path, limits: ExtractionLimits, budget: _Budget) -> str:
    """One paragraph per row, ``header: value`` pairs, so a row is searchable by its field names."""
    raw = _read_text(path, limits, budget)
    sample = raw[:16384]
    try:
        dialect: Any = csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel_tab if path.suffix.lower() == ".tsv" else csv.excel
    rows = [row for row in csv.reader(io.StringIO(raw), dialect) if any(c.strip() for c in row)]
    if not rows:
        return ""
    has_header = False
    try:
        has_header = csv.Sniffer().has_header(sample)
    except csv.Error:
        pass
    header = [h.strip() for h in rows[0]] if has_header else []
    body = rows[1:] if has_header else rows
    lines = []
    for row in body:
        if header:
            pairs = [f"{h}: {v.strip()}" if h else v.strip() for h, v in zip(header, row) if v.strip()]
            pairs += [v.strip() for v in row[len(header) :] if v.strip()]
            lines.append("; ".join(pairs))
        else:
            lines.append("; ".join(v.strip() for v in row if v.strip()))
    return "\n\n".join(line for line in lines if line)


def json_text_fields(value: Any, key: str = "") -> list[str]:
    """The text fields of a JSON value: every string leaf (short ones keep their key as a label)."""
    out: list[str] = []
    if isinstance(value, str):
        text = value.strip()
        if text:
            short = len(text) < 80 and key and not key.isdigit()
            out.append(f"{key}: {text}" if short else text)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.extend(json_text_fields(v, str(k)))
    elif isinstance(value, list):
        for item in value:
            out.extend(json_text_fields(item, key))
    return out


def _read_json(path: Path, limits: ExtractionLimits, budget: _Budget) -> str:
    try:
        value = json.loads(_read_text(path, limits, budget))
    except json.JSONDecodeError as exc:
        raise UnsupportedMedia(f"The file is not valid JSON: {exc}") from None
    return _join_json_fields(value)


def _read_jsonl(path: Path, limits: ExtractionLimits, budget: _Budget) -> str:
    values = []
    for number, line in enumerate(_read_text(path, limits, budget).splitlines(), 1):
        if line.strip():
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UnsupportedMedia(f"Line {number} is not valid JSON: {exc}") from None
    return "\n\n".join(_join_json_fields(v) for v in values)


def _join_json_fields(value: Any) -> str:
    # the fields of one object form a paragraph; objects in a list become separate paragraphs
    if isinstance(value, list):
        return "\n\n".join(_join_json_fields(v) for v in value)
    return "\n".join(json_text_fields(value))


_READERS: dict[str, Any] = {
    "text": _read_text,
    "markdown": _read_markdown,
    "pdf": _read_pdf,
    "docx": _read_docx,
    "html": _read_html,
    "csv": _read_csv,
    "json": _read_json,
    "jsonl": _read_jsonl,
}


def normalise_whitespace(text: str) -> str:
    """Unix newlines, no trailing spaces, at most one blank line between paragraphs, no control characters."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = re.sub(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]", " ", text)
    text = re.sub(r"[ \t\u00a0]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()

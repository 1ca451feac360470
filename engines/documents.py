"""Plain text out of uploaded documents: .txt .md .pdf .docx .html .csv .json (.jsonl).

The format is chosen from the file name's extension, then the declared content type, then the first bytes
(``%PDF``, a zip holding ``word/document.xml``, ``<html``). Extraction uses maintained libraries: pypdf,
python-docx, html2text, charset-normalizer for text encodings; CSV and JSON use the standard library.

Errors: a format we do not read, or a file the parser cannot read -> :class:`UnsupportedMedia`; a readable file
without any text (e.g. a scanned PDF without a text layer) -> :class:`contracts.search.EmptyDocument`, an
:class:`InvalidInput` whose message the service completes with the request field.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.errors import InvalidInput, UnsupportedMedia
from contracts.search import EmptyDocument

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


def extract_text(path: Path, filename: str, content_type: str | None = None) -> ExtractedText:
    """Extract the text of a document saved at ``path`` (``filename`` is the name the client gave)."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    kind = detect_kind(filename, content_type, head)
    reader = _READERS[kind]
    try:
        text = reader(path)
    except (UnsupportedMedia, InvalidInput):
        raise
    except Exception as exc:  # noqa: BLE001 - any parser failure means "we cannot read this file"
        raise UnsupportedMedia(
            f"Could not read '{filename}' as {kind.upper()}: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    text = normalise_whitespace(text)
    if not text.strip():
        hint = " (a scanned PDF without a text layer? OCR is not supported)" if kind == "pdf" else ""
        raise EmptyDocument(f"the document '{filename}' contains no text{hint}.")
    return ExtractedText(text=text, kind=kind, mime_type=MIME_TYPES[kind])


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


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if not _looks_like_text(data[:8192]):
        raise UnsupportedMedia("The file is binary, not text.")
    return decode_bytes(data)


def _read_pdf(path: Path) -> str:
    from pypdf import PdfReader

    reader = PdfReader(str(path))
    if reader.is_encrypted and not reader.decrypt(""):
        raise UnsupportedMedia("The PDF is password-protected.")
    pages = [(page.extract_text() or "") for page in reader.pages]
    return "\n\n".join(p.strip() for p in pages if p.strip())


def _read_docx(path: Path) -> str:
    if not zipfile.is_zipfile(path):
        raise UnsupportedMedia("Not a .docx file (not a zip archive; old binary .doc is not supported).")
    with zipfile.ZipFile(path) as zf:
        if "word/document.xml" not in zf.namelist():
            raise UnsupportedMedia("Not a .docx file (the archive has no word/document.xml).")
    import docx

    document = docx.Document(str(path))
    blocks: list[str] = [p.text for p in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            cells: list[str] = []
            for cell in row.cells:
                value = cell.text.strip()
                if value and (not cells or cells[-1] != value):  # merged cells repeat their text
                    cells.append(value)
            blocks.append(" | ".join(cells))
    return "\n\n".join(b.strip() for b in blocks if b.strip())


def _read_html(path: Path) -> str:
    import html2text

    converter = html2text.HTML2Text()
    converter.ignore_links = True
    converter.ignore_images = True
    converter.ignore_emphasis = True
    converter.body_width = 0  # no hard wrapping: keep sentences on one line
    text = converter.handle(_read_text(path))
    return re.sub(r"^\s{0,3}#{1,6}\s+", "", text, flags=re.MULTILINE)  # headings as plain lines


def _read_markdown(path: Path) -> str:
    return _read_text(path)


def _read_csv(path: Path) -> str:
    """One paragraph per row, ``header: value`` pairs, so a row is searchable by its field names."""
    raw = _read_text(path)
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


def _read_json(path: Path) -> str:
    try:
        value = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise UnsupportedMedia(f"The file is not valid JSON: {exc}") from None
    return _join_json_fields(value)


def _read_jsonl(path: Path) -> str:
    values = []
    for number, line in enumerate(_read_text(path).splitlines(), 1):
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


_READERS = {
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

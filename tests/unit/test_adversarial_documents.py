"""Document bombs (reliability issue): small uploads that expand past every budget. The hostile files are made on
the spot and stay small on disk: a .docx whose XML deflates ~1000:1 (``scripts/bench/_hostile.py``, shared with
the soak bench), a .docx whose parse needs more memory than the cap, a PDF whose page tree lists 100,000 pages (the
same page object, 600 KB), and text past the character limit. Extraction must answer 413/415 in seconds with
bounded memory, and legitimate documents must read as before."""

from __future__ import annotations

import dataclasses
import time
import zipfile
from pathlib import Path

from contracts.errors import TooLarge, UnsupportedMedia
from contracts.settings import SearchSettings
from engines.search.chunking import chunk_text
from engines.search.documents import DEFAULT_LIMITS, ExtractionLimits, extract_text
from engines.search.isolation import extract_text_isolated
from scripts.bench._hostile import docx_bomb, legit_docx
from tests.unit.test_documents import make_pdf, write_pdf

MB = 1 << 20


def limits(**changes: float) -> ExtractionLimits:
    return dataclasses.replace(DEFAULT_LIMITS, **changes)  # type: ignore[arg-type]


def page_tree_bomb(path: Path, kids: int, count: int) -> Path:
    """A PDF whose page tree lists the same page object ``kids`` times and declares ``/Count count``."""
    stream = b"BT /F1 12 Tf 72 720 Td (Only page) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b"3 0 R " * kids + b"] /Count " + str(count).encode() + b" >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
        b"/Contents 4 0 R >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return write_pdf(path, objects)


def timed(work):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    try:
        return work(), time.monotonic() - started
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc, time.monotonic() - started


def test_docx_that_expands_past_the_limit_is_413_by_declared_size(tmp_path: Path) -> None:
    bomb = docx_bomb(tmp_path / "bomb.docx", 3_500_000)  # ~120 MB of XML
    assert bomb.stat().st_size < 400_000
    error, seconds = timed(lambda: extract_text_isolated(bomb, "bomb.docx"))
    assert isinstance(error, TooLarge), error
    assert "expands to" in error.detail and "100 MB" in error.detail
    assert seconds < 10


def test_actual_decompressed_bytes_are_counted_when_the_archive_lies(tmp_path: Path) -> None:
    bomb = docx_bomb(tmp_path / "liar.docx", 600_000)  # ~21 MB of XML in ~30 KB
    data = bytearray(bomb.read_bytes())
    with zipfile.ZipFile(bomb) as zf:
        info = zf.getinfo("word/document.xml")
    real = info.file_size.to_bytes(4, "little")
    assert data.count(real) >= 1
    data = data.replace(real, (1000).to_bytes(4, "little"))  # local header and central directory claim 1 KB
    bomb.write_bytes(bytes(data))
    error, seconds = timed(lambda: extract_text_isolated(bomb, "liar.docx", None, limits(max_expanded_bytes=4 * MB)))
    assert isinstance(error, (TooLarge, UnsupportedMedia)), error  # never read past its claim; 415 or 413
    assert seconds < 10
    # the same file with its true sizes: refused by what actually decompresses, the declared sizes being under it
    honest = docx_bomb(tmp_path / "honest.docx", 600_000)
    error, _ = timed(lambda: extract_text(honest, "honest.docx", None, limits(max_expanded_bytes=4 * MB)))
    assert isinstance(error, TooLarge) and "expands to" in error.detail


def test_zip_sniffed_without_extension_is_bounded_too(tmp_path: Path) -> None:
    bomb = docx_bomb(tmp_path / "upload", 600_000)
    error, _ = timed(lambda: extract_text_isolated(bomb, "upload", None, limits(max_expanded_bytes=4 * MB)))
    assert isinstance(error, TooLarge), error


def test_docx_whose_parse_needs_more_memory_than_the_cap_is_413(tmp_path: Path) -> None:
    bomb = docx_bomb(tmp_path / "heavy.docx", 600_000)  # 21 MB of XML: several hundred MB as a tree
    error, seconds = timed(lambda: extract_text_isolated(bomb, "heavy.docx", None, limits(memory_bytes=400 * MB)))
    assert isinstance(error, TooLarge), error
    assert "memory" in error.detail
    assert seconds < 20


def test_runaway_extraction_is_killed_at_the_time_limit(tmp_path: Path) -> None:
    bomb = docx_bomb(tmp_path / "slow.docx", 600_000)
    error, seconds = timed(lambda: extract_text_isolated(bomb, "slow.docx", None, limits(timeout_seconds=1.0)))
    assert isinstance(error, TooLarge), error
    assert "longer than 1 s" in error.detail
    assert seconds < 8


def test_pdf_page_tree_of_100000_pages_is_413_at_once(tmp_path: Path) -> None:
    bomb = page_tree_bomb(tmp_path / "pages.pdf", 100_000, 100_000)
    assert bomb.stat().st_size < 700_000
    error, seconds = timed(lambda: extract_text_isolated(bomb, "pages.pdf"))
    assert isinstance(error, TooLarge), error
    assert "100,000 pages" in error.detail and "2,000" in error.detail
    assert seconds < 10


def test_pdf_whose_count_lies_is_walked_lazily_and_each_page_once(tmp_path: Path) -> None:
    bomb = page_tree_bomb(tmp_path / "liar.pdf", 100_000, 1)
    out, seconds = timed(lambda: extract_text_isolated(bomb, "liar.pdf"))
    assert not isinstance(out, Exception), out
    assert out.text == "Only page"
    assert seconds < 10


def test_pdf_with_more_pages_than_the_limit_is_413_declared_or_walked(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(3):
        writer.add_blank_page(612, 792)
    three = tmp_path / "three.pdf"
    writer.write(str(three))
    error, _ = timed(lambda: extract_text(three, "three.pdf", None, limits(max_pages=2)))
    assert isinstance(error, TooLarge) and "has 3 pages" in error.detail
    data = three.read_bytes()
    assert data.count(b"/Count 3") == 1
    lying = tmp_path / "lying.pdf"
    lying.write_bytes(data.replace(b"/Count 3", b"/Count 1"))  # same length: the xref stays right
    error, _ = timed(lambda: extract_text(lying, "lying.pdf", None, limits(max_pages=2)))
    assert isinstance(error, TooLarge) and "more than 2 pages" in error.detail


def test_text_past_the_character_limit_is_413(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("word " * 400)
    error, _ = timed(lambda: extract_text_isolated(big, "big.txt", None, limits(max_chars=1000)))
    assert isinstance(error, TooLarge) and "1,000 characters" in error.detail
    assert extract_text(big, "big.txt", None, limits(max_chars=2000)).text.startswith("word word")


def test_legitimate_documents_read_the_same_in_the_child(tmp_path: Path) -> None:
    docx_path = legit_docx(tmp_path / "hours.docx")
    pdf_path = make_pdf(tmp_path / "notice.pdf", ["Water will be off on Tuesday.", "Boil water before use."])
    for path in (docx_path, pdf_path):
        isolated = extract_text_isolated(path, path.name, None, limits(memory_bytes=400 * MB))
        assert isolated == extract_text(path, path.name)
    assert "Saturday | closed" in extract_text_isolated(docx_path, "hours.docx").text


def test_extraction_limits_are_documented_settings() -> None:
    for name in (
        "extract_max_expanded_mb",
        "extract_max_pages",
        "extract_max_chars",
        "extract_timeout_seconds",
        "extract_memory_mb",
    ):
        assert SearchSettings.model_fields[name].description
    assert ExtractionLimits.from_settings(SearchSettings(extract_max_pages=7)).max_pages == 7


def test_docx_of_many_tiny_paragraphs_is_refused_by_its_chunk_count_before_embedding(tmp_path: Path) -> None:
    # 7 MB of XML in ~50 KB: under every extraction limit, but 200,000 paragraphs make ~11,000 chunks, each an
    # embedding (the soak bench's bomb: 300 s and a 408 before the chunk limit and linear-time chunking)
    bomb = docx_bomb(tmp_path / "paragraphs.docx", 200_000)
    extracted, _ = timed(lambda: extract_text_isolated(bomb, "paragraphs.docx"))
    assert not isinstance(extracted, Exception), extracted
    cap = SearchSettings().max_document_chunks
    error, seconds = timed(lambda: chunk_text(extracted.text, max_chunks=cap, name="paragraphs.docx"))
    assert isinstance(error, TooLarge), error
    assert "'paragraphs.docx'" in error.detail and f"more than {cap} passages" in error.detail
    assert seconds < 5
    everything = chunk_text(extracted.text)  # no cap: linear in the paragraphs, every chunk an exact slice
    assert len(everything) > cap
    assert all(extracted.text[c.start : c.end] == c.text for c in everything[:: len(everything) // 50])


def test_a_document_at_the_chunk_limit_is_accepted(tmp_path: Path) -> None:
    text = "".join(f"Sentence number {i} is about the Drakensberg in winter.\n\n" for i in range(400))
    chunks = chunk_text(text)
    assert chunk_text(text, max_chunks=len(chunks)) == chunks
    assert isinstance(timed(lambda: chunk_text(text, max_chunks=len(chunks) - 1))[0], TooLarge)

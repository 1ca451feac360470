"""Document text extraction (real files of every accepted format) and chunking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.errors import InvalidInput, UnsupportedMedia
from engines.search.chunking import chunk_text, sentence_spans
from engines.search.documents import extract_text


def make_pdf(path: Path, lines: list[str]) -> Path:
    """A minimal, valid one-page PDF with a Helvetica text layer (what a word processor export contains)."""

    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"] + [f"({esc(line)}) Tj T*" for line in lines] + ["ET"]
    stream = "\n".join(ops).encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
        b"/Contents 4 0 R >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    return write_pdf(path, objects)


def write_pdf(path: Path, objects: list[bytes]) -> Path:
    """A PDF file of these numbered objects (object 1 the catalog), with its cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))
    return path


def test_plain_text_utf8_and_legacy_encoding(tmp_path: Path) -> None:
    utf8 = tmp_path / "notice.txt"
    utf8.write_text("Umtholampilo uvulwa ngo-07:00.\r\n\r\n\r\n\r\nKuvalwa ngo-16:00. Café ✓", encoding="utf-8")
    out = extract_text(utf8, "notice.txt")
    assert out.kind == "text" and out.mime_type == "text/plain"
    assert out.text == "Umtholampilo uvulwa ngo-07:00.\n\nKuvalwa ngo-16:00. Café ✓"

    legacy = tmp_path / "legacy.txt"
    legacy.write_bytes("Die kliniek is oop. Ons sê dankie vir u geduld, mevrou Müller.".encode("cp1252"))
    assert "sê dankie" in extract_text(legacy, "legacy.txt").text

    bom16 = tmp_path / "utf16.txt"
    bom16.write_bytes("Lerato Mokoena".encode("utf-16"))
    assert extract_text(bom16, "utf16.txt").text == "Lerato Mokoena"


def test_markdown_keeps_text(tmp_path: Path) -> None:
    md = tmp_path / "guide.md"
    md.write_text("# Water\n\nWard 17 has **no water** on 14 May.\n", encoding="utf-8")
    out = extract_text(md, "guide.md")
    assert out.kind == "markdown" and "Ward 17 has **no water** on 14 May." in out.text


def test_pdf_text_layer(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "notice.pdf", ["Water interruption notice for Ward 23.", "Chatsworth, 21 May."])
    out = extract_text(pdf, "notice.pdf")
    assert out.kind == "pdf" and out.mime_type == "application/pdf"
    assert "Water interruption notice for Ward 23." in out.text and "Chatsworth, 21 May." in out.text


def test_pdf_without_text_is_400_and_broken_pdf_is_415(tmp_path: Path) -> None:
    blank = make_pdf(tmp_path / "scan.pdf", [])
    with pytest.raises(InvalidInput, match="no text"):
        extract_text(blank, "scan.pdf")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\nthis is not really a pdf\n")
    with pytest.raises(UnsupportedMedia, match=r"Could not read 'broken\.pdf' as PDF"):
        extract_text(broken, "broken.pdf")


def test_docx_paragraphs_and_tables(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Clinic hours", level=1)
    document.add_paragraph("Bellville Kliniek is oop van Maandag tot Vrydag.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Day", "Hours"
    table.cell(1, 0).text, table.cell(1, 1).text = "Saturday", "08:00-12:00"
    path = tmp_path / "hours.docx"
    document.save(str(path))
    out = extract_text(path, "hours.docx")
    assert out.kind == "docx"
    assert "Clinic hours" in out.text and "Bellville Kliniek is oop van Maandag tot Vrydag." in out.text
    assert "Saturday | 08:00-12:00" in out.text


def test_docx_that_is_not_a_zip_is_415(tmp_path: Path) -> None:
    fake = tmp_path / "old.docx"
    fake.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512)  # an OLE2 (.doc) header
    with pytest.raises(UnsupportedMedia, match="docx"):
        extract_text(fake, "old.docx")


def test_html_to_text_without_markup_or_scripts(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        "<html><head><title>t</title><style>p{color:red}</style><script>var x = 1;</script></head><body>"
        "<h2>Refuse</h2><p>Refuse is collected on <b>Tuesday</b>. <a href='https://x'>Details</a></p>"
        "<ul><li>Ward 17</li><li>Ward 23</li></ul></body></html>",
        encoding="utf-8",
    )
    out = extract_text(page, "page.html")
    assert out.kind == "html"
    assert "Refuse is collected on Tuesday." in out.text and "Ward 23" in out.text
    assert "<" not in out.text and "var x" not in out.text and "https://x" not in out.text


def test_csv_rows_become_labelled_paragraphs(tmp_path: Path) -> None:
    table = tmp_path / "wards.csv"
    table.write_text("ward,area,collection day\n17,Umlazi,Tuesday\n23,Chatsworth,Thursday\n", encoding="utf-8")
    out = extract_text(table, "wards.csv")
    assert out.kind == "csv"
    assert out.text.split("\n\n") == [
        "ward: 17; area: Umlazi; collection day: Tuesday",
        "ward: 23; area: Chatsworth; collection day: Thursday",
    ]


def test_json_text_fields_and_jsonl(tmp_path: Path) -> None:
    data = {
        "notices": [
            {"id": 7, "title": "Water", "body": "Ward 9 has no water on 28 May from 08:00 to 20:00.", "open": True},
            {"id": 8, "title": "Refuse", "body": "Refuse is collected on Mondays."},
        ]
    }
    path = tmp_path / "notices.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = extract_text(path, "notices.json")
    assert out.kind == "json"
    assert "Ward 9 has no water on 28 May from 08:00 to 20:00." in out.text and "title: Refuse" in out.text
    assert "True" not in out.text and "7" not in out.text.split()  # only text fields

    lines = tmp_path / "notices.jsonl"
    lines.write_text("\n".join(json.dumps(n) for n in data["notices"]), encoding="utf-8")
    assert extract_text(lines, "notices.jsonl").text.count("title:") == 2

    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(UnsupportedMedia, match="not valid JSON"):
        extract_text(bad, "bad.json")


def test_unsupported_types_and_empty_text(tmp_path: Path) -> None:
    exe = tmp_path / "setup.exe"
    exe.write_bytes(b"MZ\x90\x00" + bytes(range(256)))
    with pytest.raises(UnsupportedMedia, match=r"Unsupported document type \(\.exe\)"):
        extract_text(exe, "setup.exe")
    binary = tmp_path / "blob"
    binary.write_bytes(b"\x00\x01\x02\x03" * 100)
    with pytest.raises(UnsupportedMedia):
        extract_text(binary, "blob")
    binary_txt = tmp_path / "image.txt"
    binary_txt.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 64)
    with pytest.raises(UnsupportedMedia, match="binary"):
        extract_text(binary_txt, "image.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n \t ", encoding="utf-8")
    with pytest.raises(InvalidInput, match="contains no text"):
        extract_text(empty, "empty.txt")


def test_content_sniffing_without_extension(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "upload", ["Sniffed PDF text."])
    assert extract_text(pdf, "upload").kind == "pdf"
    html = tmp_path / "page"
    html.write_text("<!DOCTYPE html><html><body><p>Sniffed page.</p></body></html>", encoding="utf-8")
    assert extract_text(html, "page").text == "Sniffed page."
    declared = tmp_path / "data"
    declared.write_text("a,b\n1,2\n", encoding="utf-8")
    assert extract_text(declared, "data", "text/csv").kind == "csv"


# --- chunking ---------------------------------------------------------------------------------------------

TEXT = (
    "Dr. Dlamini opened the clinic in 1998. It serves 4,000 patients a year! Does it open on Sundays? No.\n\n"
    "Umtholampilo uvulwa ngo-07:00 ekuseni. Abantu abaningi bafika kusenesikhathi. Ukuhlolelwa i-HIV kumahhala.\n"
    "A line without a full stop\n\n" + "A very long sentence that keeps going without any full stop at all " * 12
)


def test_sentence_spans_respect_abbreviations_and_lines() -> None:
    sentences = [TEXT[s.start : s.end] for s in sentence_spans(TEXT)]
    assert sentences[0] == "Dr. Dlamini opened the clinic in 1998."
    assert "A line without a full stop" in sentences
    spans = sentence_spans(TEXT)
    assert spans[0].paragraph_start and spans[4].paragraph_start and not spans[5].paragraph_start


@pytest.mark.parametrize("max_chars,overlap", [(120, 40), (200, 60), (800, 150)])
def test_chunks_are_exact_slices_with_overlap_and_limits(max_chars: int, overlap: int) -> None:
    chunks = chunk_text(TEXT, max_chars=max_chars, overlap_chars=overlap, min_chars=60)
    assert chunks and [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert TEXT[c.start : c.end] == c.text
        assert len(c.text) <= max_chars
        assert c.text == c.text.strip()
    # the chunks cover every non-space character and move forward
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(TEXT) if not ch.isspace())
    assert all(b.start > a.start and b.end > a.end for a, b in zip(chunks, chunks[1:]))
    if max_chars < len(TEXT):
        assert any(b.start < a.end for a, b in zip(chunks, chunks[1:]))  # some overlap exists


def test_paragraphs_start_new_chunks_once_big_enough() -> None:
    text = (
        "First paragraph sentence one. First paragraph sentence two.\n\n"
        "Second paragraph sentence one. Second paragraph sentence two."
    )
    chunks = chunk_text(text, max_chars=400, overlap_chars=0, min_chars=40)
    assert [c.text for c in chunks] == [
        "First paragraph sentence one. First paragraph sentence two.",
        "Second paragraph sentence one. Second paragraph sentence two.",
    ]
    # small paragraphs (headings) stay with what follows
    assert len(chunk_text("Heading\n\nBody text of the section.", max_chars=400, min_chars=200)) == 1


def test_overlap_repeats_whole_sentences() -> None:
    sentences = [f"Sentence number {i} talks about ward {i}." for i in range(12)]
    text = " ".join(sentences)
    chunks = chunk_text(text, max_chars=150, overlap_chars=70, min_chars=50)
    for a, b in zip(chunks, chunks[1:]):
        shared = text[b.start : a.end]
        assert shared.startswith("Sentence number") and shared.endswith(".")

"""Hostile files for the soak bench and the reliability tests, made on the spot and small on disk: a WAV whose header
claims days of audio, and a .docx whose XML deflates about 1000:1 (a document bomb). The tests
(``tests/unit/test_adversarial_*.py``, ``tests/integration/test_largest_requests.py``) import them from here.
"""

from __future__ import annotations

import io
import struct
import wave
import zipfile
from pathlib import Path

import numpy as np

RATE = 8000  # the lying WAV's sample rate
W = b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
PARAGRAPH = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>"


def tone(seconds: float) -> np.ndarray:
    return np.sin(np.arange(int(seconds * RATE)) * 2 * np.pi * 440 / RATE).astype(np.float32) * 0.3


def lying_wav(path: Path, seconds: float = 1.0) -> Path:
    """8 kHz 8-bit WAV of ``seconds`` whose header claims 2^32 samples (6.2 days; 32 GiB once at 16 kHz float)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(RATE)
        w.writeframes((tone(seconds) * 127 + 128).astype(np.uint8).tobytes())
    data = bytearray(buf.getvalue())
    at = data.find(b"data")
    data[at:at] = b"fact" + struct.pack("<II", 4, 0xFFFFFFF0)  # sample count, read for any codec
    struct.pack_into("<I", data, 4, 0xFFFFFF00)  # RIFF size
    struct.pack_into("<I", data, at + 12 + 4, 0xFFFFFF00 - 48)  # data size
    path.write_bytes(bytes(data))
    return path


def legit_docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.add_paragraph("Clinic hours: Monday to Friday, 08:00 to 16:00.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Saturday", "closed"
    document.save(str(path))
    return path


def docx_bomb(path: Path, paragraphs: int) -> Path:
    """A real .docx whose word/document.xml is ``paragraphs`` one-letter paragraphs (35 bytes each), streamed
    into the archive so the test never holds the XML."""
    source = legit_docx(path.with_suffix(".src.docx"))
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
        for info in src.infolist():
            if info.filename != "word/document.xml":
                out.writestr(info.filename, src.read(info.filename))
        with out.open("word/document.xml", "w") as xml:
            xml.write(W)
            block = PARAGRAPH * 30_000
            for _ in range(paragraphs // 30_000):
                xml.write(block)
            xml.write(b"</w:body></w:document>")
    return path

"""Seconds of audio in a file, from its first bytes and its size, without decoding it.

The edge sizes a transcription before it admits it (``serve_app/admission/capacity.py``), with only the start of the
upload in hand. The container's header says the length exactly for WAV, AIFF, FLAC, MP3 with a Xing/Info frame and
MP4/M4A whose ``moov`` comes first, and a constant bit rate for other MP3; Ogg is estimated from its size at a
speech bit rate of its codec, anything else at :data:`FALLBACK_BYTES_PER_S`. An estimate, never a validation: a file
that lies is found out when it is decoded.
"""

from __future__ import annotations

import struct

FALLBACK_BYTES_PER_S = 12_000  # about 96 kbit/s: compressed speech of an unknown container
OPUS_BYTES_PER_S = 3_000  # Ogg states no length up front: Opus voice notes run at 16 to 32 kbit/s,
VORBIS_BYTES_PER_S = 8_000  # Vorbis speech at about 64 kbit/s
HEAD_BYTES = 64 * 1024  # what :func:`audio_seconds` needs of the file at most


def audio_seconds(head: bytes, size: int) -> float:
    """Seconds of audio in a file of ``size`` bytes that starts with ``head``."""
    size = max(size, len(head))
    for reader in (_wav, _aiff, _flac, _mp4, _ogg, _mp3):
        try:
            seconds = reader(head, size)
        except (struct.error, IndexError, ValueError, ZeroDivisionError):
            seconds = None
        if seconds is not None and seconds >= 0:
            return seconds
    return size / FALLBACK_BYTES_PER_S


def _wav(head: bytes, size: int) -> float | None:
    if head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
        return None
    pos, byte_rate = 12, 0
    while pos + 8 <= len(head):
        chunk, length = head[pos : pos + 4], struct.unpack_from("<I", head, pos + 4)[0]
        if chunk == b"fmt ":
            byte_rate = struct.unpack_from("<I", head, pos + 16)[0]
        elif chunk == b"data" and byte_rate:
            data = length if 0 < length < 0xFFFFFFFF else size - pos - 8  # streamed or RF64: to the end
            return min(data, size - pos - 8) / byte_rate
        pos += 8 + length + (length & 1)
    return (size - pos) / byte_rate if byte_rate else None


def _aiff(head: bytes, size: int) -> float | None:
    if head[:4] != b"FORM" or head[8:12] not in (b"AIFF", b"AIFC"):
        return None
    pos = 12
    while pos + 8 <= len(head):
        chunk, length = head[pos : pos + 4], struct.unpack_from(">I", head, pos + 4)[0]
        if chunk == b"COMM":
            frames = struct.unpack_from(">I", head, pos + 10)[0]
            exponent, mantissa = struct.unpack_from(">HQ", head, pos + 16)  # 80-bit extended sample rate
            rate = mantissa * 2.0 ** ((exponent & 0x7FFF) - 16383 - 63)
            return frames / rate
        pos += 8 + length + (length & 1)
    return None


def _flac(head: bytes, size: int) -> float | None:
    if head[:4] != b"fLaC" or head[4] & 0x7F != 0:  # STREAMINFO is always the first metadata block
        return None
    info = int.from_bytes(head[18:26], "big")  # sample rate (20 bits), channels, bits, total samples (36 bits)
    rate, total = info >> 44, info & ((1 << 36) - 1)
    if not rate:
        return None
    if total:
        return total / rate
    channels, bits = ((info >> 41) & 7) + 1, ((info >> 36) & 31) + 1
    return size / (rate * channels * bits / 8 * 0.6)  # unknown length: lossless speech is about 60 % of PCM


def _mp4(head: bytes, size: int) -> float | None:
    if head[4:8] != b"ftyp":
        return None
    box = _box(head, 0, len(head), b"moov")
    header = _box(head, box[0], box[1], b"mvhd") if box else None
    if header is None:
        return size / FALLBACK_BYTES_PER_S  # the index comes after the audio: not in the head
    start = header[0]
    if head[start] == 1:
        timescale, duration = struct.unpack_from(">IQ", head, start + 20)
    else:
        timescale, duration = struct.unpack_from(">II", head, start + 12)
    return duration / timescale


def _box(data: bytes, start: int, end: int, name: bytes) -> tuple[int, int] | None:
    """(start, end) of the contents of the first box ``name`` between ``start`` and ``end``."""
    pos = start
    while pos + 8 <= min(end, len(data)):
        length, kind = struct.unpack_from(">I4s", data, pos)
        header = 8
        if length == 1:
            length, header = struct.unpack_from(">Q", data, pos + 8)[0], 16
        elif length == 0:
            length = end - pos
        if length < header:
            return None
        if kind == name:
            return pos + header, min(pos + length, end)
        pos += length
    return None


def _ogg(head: bytes, size: int) -> float | None:
    if head[:4] != b"OggS":
        return None
    packet = head[28 + head[26] :]  # after the first page's header and segment table
    if packet[:8] == b"OpusHead":
        return size / OPUS_BYTES_PER_S
    return size / VORBIS_BYTES_PER_S  # Vorbis's nominal bit rate is the encoder's quality, not the file's


_MP3_BITRATES = {  # kbit/s by (MPEG-1?, layer) and index
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _mp3(head: bytes, size: int) -> float | None:
    start = 0
    if head[:3] == b"ID3":
        tag = (head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9]
        start = 10 + tag + (10 if head[5] & 0x10 else 0)
        if start + 4 > len(head):  # a tag larger than the head (cover art): the audio is the rest, at a guess
            return max(0, size - start) / FALLBACK_BYTES_PER_S
    for pos in range(start, min(len(head) - 4, start + 4096)):
        if head[pos] != 0xFF or head[pos + 1] & 0xE0 != 0xE0:
            continue
        version, layer = (head[pos + 1] >> 3) & 3, 4 - ((head[pos + 1] >> 1) & 3)
        bitrate_index, rate_index = head[pos + 2] >> 4, (head[pos + 2] >> 2) & 3
        if version == 1 or layer == 4 or bitrate_index in (0, 15) or rate_index == 3:
            continue
        mpeg1 = version == 3
        bitrate = _MP3_BITRATES[(mpeg1, layer)][bitrate_index] * 1000
        rate = _MP3_RATES[version][rate_index]
        samples = 384 if layer == 1 else 1152 if mpeg1 or layer == 2 else 576
        frames = _xing_frames(head, pos, mpeg1, (head[pos + 3] >> 6) == 3)
        if frames:
            return frames * samples / rate
        return (size - pos) * 8 / bitrate
    return None


def _xing_frames(head: bytes, pos: int, mpeg1: bool, mono: bool) -> int | None:
    """The frame count of a Xing/Info header in the MP3 frame at ``pos`` (VBR files carry one), else None."""
    offset = pos + 4 + ((17 if mono else 32) if mpeg1 else (9 if mono else 17))
    if head[offset : offset + 4] in (b"Xing", b"Info") and head[offset + 7] & 1:
        return int(struct.unpack_from(">I", head, offset + 8)[0])
    return None

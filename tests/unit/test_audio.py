"""engines.speech.audio: every listed format decodes to 16 kHz mono float32 with true metadata; bad input -> 415/400."""

from __future__ import annotations

import wave
from pathlib import Path

import av
import numpy as np
import pytest

from contracts.errors import InvalidInput, UnsupportedMedia
from engines.speech.audio import SAMPLE_RATE, iter_audio, load_audio, load_pcm16, probe
from tests.speechdata import FORMATS, write_audio

RATE = 22050
SECONDS = 2.5
TONE_HZ = 440.0
MIME = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "aac": "audio/aac",
    "ogg": "audio/ogg",
    "mp4": "audio/mp4",
    "aiff": "audio/aiff",
    "opus": "audio/opus",
}


def _tone(seconds: float = SECONDS, rate: int = RATE, hz: float = TONE_HZ) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    envelope = np.minimum(1.0, np.minimum(t, seconds - t) * 20)  # no clicks at the ends
    return (0.5 * np.sin(2 * np.pi * hz * t) * envelope).astype(np.float32)


@pytest.fixture(scope="module")
def tone_files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    folder = tmp_path_factory.mktemp("formats")
    files = {}
    for ext in FORMATS:
        for channels in (1, 2):
            files[ext, channels] = write_audio(_tone(), RATE, folder / f"tone-{channels}ch.{ext}", ext, channels)
    return files


@pytest.mark.parametrize("ext", list(FORMATS))
@pytest.mark.parametrize("channels", [1, 2])
def test_every_format_decodes_to_16k_mono(tone_files, ext: str, channels: int) -> None:
    path = tone_files[ext, channels]
    info = probe(path)
    expected_channels = 2 if FORMATS[ext][1] == "vorbis" else channels  # our Vorbis encoder writes stereo only
    assert info.channels == expected_channels
    assert info.sample_rate == FORMATS[ext][2]
    assert info.frame_rate == float(info.sample_rate)
    assert info.mime_type == MIME[ext]
    assert info.size_bytes == path.stat().st_size
    assert info.duration == pytest.approx(SECONDS, abs=0.6)  # ADTS AAC headers only estimate the duration

    audio = load_audio(path, info)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size / SAMPLE_RATE == pytest.approx(SECONDS, abs=0.15)  # codec priming/padding only
    # the tone survives: its energy sits at 440 Hz after resampling
    spectrum = np.abs(np.fft.rfft(audio))
    peak_hz = np.argmax(spectrum) * SAMPLE_RATE / audio.size
    assert peak_hz == pytest.approx(TONE_HZ, abs=5)
    rms = float(np.sqrt(np.mean(audio**2)))
    assert 0.25 < rms < 0.45  # 0.5 amplitude sine -> 0.35 rms (stereo downmixed, not summed)


def test_iter_audio_yields_bounded_blocks(tmp_path: Path) -> None:
    path = write_audio(_tone(12.0), RATE, tmp_path / "long.flac")
    blocks = list(iter_audio(path, block_seconds=2.0))
    assert all(b.size == 2 * SAMPLE_RATE for b in blocks[:-1])
    assert 0 < blocks[-1].size <= 2 * SAMPLE_RATE
    joined = np.concatenate(blocks)
    assert np.array_equal(joined, load_audio(path))


def test_not_audio_is_415(tmp_path: Path) -> None:
    text = tmp_path / "notes.wav"
    text.write_text("this is a text file pretending to be audio\n" * 50)
    with pytest.raises(UnsupportedMedia, match="not audio"):
        probe(text)


def test_corrupt_header_is_415(tmp_path: Path) -> None:
    good = write_audio(_tone(), RATE, tmp_path / "good.mp4", "mp4")
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00" * 64 + good.read_bytes()[64:2000])
    with pytest.raises(UnsupportedMedia):
        load_audio(broken)


def test_empty_file_is_400(tmp_path: Path) -> None:
    empty = tmp_path / "empty.mp3"
    empty.write_bytes(b"")
    with pytest.raises(InvalidInput, match="empty"):
        probe(empty)


def test_zero_samples_is_400(tmp_path: Path) -> None:
    path = tmp_path / "zero.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"")
    with pytest.raises(InvalidInput, match="zero-length"):
        load_audio(path)


def test_video_without_audio_is_415(tmp_path: Path) -> None:
    path = tmp_path / "silent-film.mp4"
    with av.open(str(path), "w") as c:
        stream = c.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for _ in range(5):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode(None):
            c.mux(packet)
    with pytest.raises(UnsupportedMedia, match="no audio stream"):
        probe(path)


def test_playlists_never_open_other_files(tmp_path: Path) -> None:
    """An HLS playlist or ffconcat list naming a local file is refused (FFmpeg format allow-list)."""
    target = write_audio(_tone(), RATE, tmp_path / "secret.wav")
    playlist = tmp_path / "list.m3u8"
    playlist.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nfile://{target}\n#EXT-X-ENDLIST\n")
    concat = tmp_path / "list.ffconcat"
    concat.write_text(f"ffconcat version 1.0\nfile {target}\n")
    for path in (playlist, concat):
        with pytest.raises(UnsupportedMedia):
            load_audio(path)


def test_truncated_file_keeps_what_decodes(tmp_path: Path) -> None:
    good = write_audio(_tone(4.0), RATE, tmp_path / "full.mp3", "mp3")
    half = tmp_path / "half.mp3"
    half.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    audio = load_audio(half)
    assert 1.0 < audio.size / SAMPLE_RATE < 3.0


def test_pcm16_frames() -> None:
    pcm = (np.array([0, 16384, -32768, 32767], dtype="<i2")).tobytes() + b"\x01"  # odd trailing byte dropped
    audio = load_pcm16(pcm)
    assert audio.dtype == np.float32
    assert audio.tolist() == pytest.approx([0.0, 0.5, -1.0, 32767 / 32768])

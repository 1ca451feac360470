"""Audio decoding with PyAV (its bundled FFmpeg; no system ffmpeg): any supported file -> 16 kHz mono float32.

- :func:`probe` reads the container header: format, original sample rate, channels, duration, MIME type, size.
- :func:`iter_audio` decodes and resamples frame by frame and yields fixed-size blocks, so a long file never
  sits in memory in its original form (only the blocks the caller keeps).
- :func:`load_audio` collects the whole 16 kHz signal into one array (4 bytes per sample: 230 MB per hour), for
  the steps that need it all (diarisation, music detection). It never sizes memory from the header: a header's
  duration is a claim (a 8 KB WAV can say it lasts six days), so the array is built from the blocks actually
  decoded, and ``max_seconds`` refuses audio that decodes to more than the cap (:class:`TooLarge`, 413) as soon
  as the decoder passes it, without reading the rest.
- :func:`load_pcm16` reads a live stream's raw PCM at its own rate, :func:`resample` brings it to 16 kHz (soxr).

Errors are the service's: no audio stream, a file FFmpeg cannot parse, or a format outside the allow-list ->
:class:`UnsupportedMedia` (415); an empty file or one with no samples -> :class:`InvalidInput` (400); more
decoded audio than ``load_audio``'s ``max_seconds`` -> :class:`TooLarge` (413).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import av
import numpy as np
import soxr

from contracts.errors import InvalidInput, TooLarge, UnsupportedMedia

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
SUPPORTED_FORMATS = "WAV, MP3, FLAC, AAC, OGG, MP4, AIFF, OPUS"
# FFmpeg demuxers we let open an upload (FFmpeg's `format_whitelist`): the spec's formats plus the containers
# they commonly arrive in. Playlist/concat demuxers (hls, concat, ...) that would read other files never open.
ALLOWED_DEMUXERS = ("wav", "w64", "mp3", "flac", "aac", "ogg", "mov", "mp4", "m4a", "aiff", "matroska", "webm", "caf")
_MIME = {
    "wav": "audio/wav",
    "w64": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "aac": "audio/aac",
    "aiff": "audio/aiff",
    "caf": "audio/x-caf",
    "matroska": "audio/x-matroska",
    "webm": "audio/webm",
}


@dataclass
class AudioInfo:
    """What the container says about the original audio (before resampling)."""

    format: str  # FFmpeg demuxer name, e.g. "wav", "mov,mp4,m4a,3gp,3g2,mj2"
    codec: str  # e.g. "pcm_s16le", "opus"
    mime_type: str
    sample_rate: int
    channels: int
    duration: float  # seconds, as the header CLAIMS (0.0 when it does not say): never size memory from it
    size_bytes: int
    frame_rate: float  # sample frames per second (pydub's `frame_rate`), i.e. the original sample rate
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _mime_type(format_name: str, codec: str, has_video: bool) -> str:
    names = format_name.split(",")
    if "mp4" in names or "mov" in names:
        return "video/mp4" if has_video else "audio/mp4"
    if "ogg" in names:
        return "audio/opus" if codec == "opus" else "audio/ogg"
    if "webm" in names and has_video:
        return "video/webm"
    return _MIME.get(names[0], f"audio/{names[0]}")


def _open(path: Path) -> av.container.InputContainer:
    size = path.stat().st_size
    if size == 0:
        raise InvalidInput("The uploaded file is empty (0 bytes).")
    try:
        return av.open(str(path), options={"format_whitelist": ",".join(ALLOWED_DEMUXERS)})
    except av.FFmpegError as exc:
        raise UnsupportedMedia(
            f"Unsupported media type: the file is not audio in a supported format ({SUPPORTED_FORMATS}) "
            f"or it is corrupt ({type(exc).__name__})."
        ) from None


def _audio_stream(container: av.container.InputContainer) -> av.audio.stream.AudioStream:
    if not container.streams.audio:
        kinds = ", ".join(sorted({s.type for s in container.streams})) or "none"
        raise UnsupportedMedia(f"Unsupported media type: the file has no audio stream (streams: {kinds}).")
    return container.streams.audio[0]


def probe(path: Path) -> AudioInfo:
    """Header facts of ``path`` without decoding it (415/400 as the module doc says)."""
    path = Path(path)
    with _open(path) as container:
        return _info(path, container, _audio_stream(container))


def _info(path: Path, container: av.container.InputContainer, stream: av.audio.stream.AudioStream) -> AudioInfo:
    duration = 0.0
    if container.duration is not None:
        duration = container.duration / av.time_base
    elif stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    codec = stream.codec_context.name
    rate = int(stream.rate or stream.codec_context.sample_rate or 0)
    channels = int(stream.codec_context.channels or 0)
    return AudioInfo(
        format=container.format.name,
        codec=codec,
        mime_type=_mime_type(container.format.name, codec, bool(container.streams.video)),
        sample_rate=rate,
        channels=channels,
        duration=round(max(duration, 0.0), 3),
        size_bytes=path.stat().st_size,
        frame_rate=float(rate),
    )


def iter_audio(path: Path, block_seconds: float = 30.0, info: AudioInfo | None = None) -> Iterator[np.ndarray]:
    """Yield the audio as 16 kHz mono float32 blocks of ``block_seconds`` (the last one shorter).

    A decoding error after some audio was decoded ends the stream early and appends a warning to
    ``info.warnings`` (when given); an error before any audio is a 415.
    """
    path = Path(path)
    block = max(1, int(block_seconds * SAMPLE_RATE))
    buffer = np.empty(block, dtype=np.float32)
    filled = 0
    emitted = 0
    with _open(path) as container:
        stream = _audio_stream(container)
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)

        def resampled():
            for frame in _frames(container, stream):
                yield from resampler.resample(frame)
            yield from resampler.resample(None)  # flush the resampler

        try:
            for out in resampled():
                samples = out.to_ndarray().reshape(-1)
                while samples.size:
                    take = min(block - filled, samples.size)
                    buffer[filled : filled + take] = samples[:take]
                    filled += take
                    samples = samples[take:]
                    if filled == block:
                        yield buffer.copy()
                        emitted += block
                        filled = 0
        except av.FFmpegError as exc:
            if emitted + filled == 0:
                raise UnsupportedMedia(
                    f"Unsupported media type: the audio stream could not be decoded ({type(exc).__name__}); "
                    f"the file is corrupt or not in a supported format ({SUPPORTED_FORMATS})."
                ) from None
            at = (emitted + filled) / SAMPLE_RATE
            message = f"Audio decoding stopped at {at:.1f} s ({type(exc).__name__}); the rest of the file is corrupt."
            log.warning("%s: %s", path.name, message)
            if info is not None:
                info.warnings.append(message)
    if filled:
        yield buffer[:filled].copy()


def _frames(container: av.container.InputContainer, stream: av.audio.stream.AudioStream):
    """Decoded frames of ``stream``; packets that fail to decode are skipped (a few corrupt packets in the
    middle of a file lose milliseconds, not the file), unless nothing at all decodes."""
    decoded_any = False
    failures = 0
    last_error: av.FFmpegError | None = None
    for packet in container.demux(stream):
        try:
            frames = packet.decode()
        except av.FFmpegError as exc:
            failures += 1
            last_error = exc
            if not decoded_any and failures >= 8:
                raise
            continue
        for frame in frames:
            decoded_any = True
            yield frame
    if not decoded_any and last_error is not None:
        raise last_error


def load_audio(path: Path, info: AudioInfo | None = None, *, max_seconds: float | None = None) -> np.ndarray:
    """The whole file as one 16 kHz mono float32 array.

    Memory follows the audio actually decoded, never the header's duration (see the module doc): blocks are
    collected as they decode and joined once at the end (peak about twice the decoded signal). With
    ``max_seconds``, decoding stops with :class:`TooLarge` as soon as the audio passes that length.
    """
    info = info or probe(path)
    limit = int(max_seconds * SAMPLE_RATE) if max_seconds is not None else None
    blocks: list[np.ndarray] = []
    n = 0
    for chunk in iter_audio(path, 30.0, info):
        n += chunk.size
        if limit is not None and n > limit:
            raise TooLarge(
                f"The audio is longer than {_hours(max_seconds or 0.0)} once decoded, the most that speaker "
                "diarisation and music detection take (they hold the whole signal in memory). Send it without "
                "them, or in shorter parts."
            )
        blocks.append(chunk)
    if n == 0:
        raise InvalidInput("The audio file contains no samples (zero-length audio).")
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def _hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def load_pcm16(data: bytes, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Raw little-endian 16-bit mono PCM at ``rate`` (the streaming protocols) -> 16 kHz float32 in [-1, 1]."""
    if len(data) % 2:
        data = data[:-1]
    return resample(np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0, rate)


def resample(audio: np.ndarray, rate: int) -> np.ndarray:
    """Mono float32 ``audio`` at ``rate`` Hz -> 16 kHz (soxr, high quality: the band above 8 kHz is cut cleanly,
    no aliasing). A whole buffer at a time: a stream resamples its uncommitted audio at every step, so there are
    no block edges to join."""
    if rate == SAMPLE_RATE or audio.size == 0:
        return audio
    return np.asarray(soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ"), dtype=np.float32)

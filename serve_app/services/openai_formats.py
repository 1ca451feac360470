"""The answer formats of OpenAI's audio routes, from a transcription result: ``json``, ``text``, ``srt``, ``vtt``,
``verbose_json`` and the server-sent events of ``stream=true``.

Segments are the result's timeline speech items (one per Whisper segment, start/end/text/confidence); words come
from the result's words (start/end/probability).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from contracts import languages
from contracts.openai import DurationUsage, VerboseSegment, VerboseTranscription, VerboseWord
from contracts.speech import TranscriptionResult

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
TEMPERATURE = 0.0  # the pipeline decodes greedily (engines/speech/whisper/recognizer.py)


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    text: str
    confidence: float | None = None


def cues(result: TranscriptionResult, text: str | None = None) -> list[Cue]:
    """The speech segments of ``result``; with ``text`` (a translation, which has no timings of its own) one cue
    over the whole audio."""
    if text is not None:
        return [Cue(0.0, result.audio_length_seconds, text.strip())] if text.strip() else []
    spoken = [
        Cue(item.start_time, item.end_time, item.text.strip(), item.confidence)
        for item in result.timeline
        if item.type == "speech" and item.text.strip()
    ]
    if not spoken and result.text.strip():  # no timeline (nothing segmented it): the transcript as one cue
        spoken = [Cue(0.0, result.audio_length_seconds, result.text.strip())]
    return spoken


def language_name(code: str) -> str:
    """OpenAI answers a language as its English name in lower case ("english"), as Whisper names it."""
    base = "zul" if code == languages.CODE_SWITCHED_ZULU else code
    lang = languages.LANGUAGES.get(base)
    return (lang.name if lang else code).lower()


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return round(len(data) / len(zlib.compress(data)), 3) if data else 0.0


def verbose(
    result: TranscriptionResult, *, task: str, words: bool, translated: str | None = None
) -> VerboseTranscription:
    """``verbose_json``: the transcript with its segments and, when asked, its words; ``translated`` (the English
    translation of non-English audio) replaces the transcript as one segment, without word timings."""
    segments = [
        VerboseSegment(
            id=i,
            seek=int(cue.start * 100),
            start=round(cue.start, 3),
            end=round(cue.end, 3),
            text=" " + cue.text,  # Whisper's segments start with their space
            tokens=[],
            temperature=TEMPERATURE,
            avg_logprob=round(math.log(cue.confidence), 4) if cue.confidence else 0.0,
            compression_ratio=_compression_ratio(cue.text),
            no_speech_prob=0.0,
        )
        for i, cue in enumerate(cues(result, translated))
    ]
    listed = None
    if words:
        timed = [] if translated is not None else result.words
        listed = [
            VerboseWord(word=w.word.strip(), start=w.start_time, end=w.end_time, probability=w.probability)
            for w in timed
        ]
    return VerboseTranscription(
        task="translate" if task == "translate" else "transcribe",
        language="english" if task == "translate" else language_name(result.language_code),
        duration=round(result.audio_length_seconds, 3),
        text=translated if translated is not None else result.text,
        segments=segments,
        words=listed,
        usage=DurationUsage(seconds=round(result.audio_length_seconds, 3)),
    )


def _clock(seconds: float, separator: str) -> str:
    millis = round(max(0.0, seconds) * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(items: list[Cue]) -> str:
    blocks = [f"{i}\n{_clock(c.start, ',')} --> {_clock(c.end, ',')}\n{c.text}\n" for i, c in enumerate(items, start=1)]
    return "\n".join(blocks)


def vtt(items: list[Cue]) -> str:
    blocks = [f"{_clock(c.start, '.')} --> {_clock(c.end, '.')}\n{c.text}\n" for c in items]
    return "WEBVTT\n\n" + "\n".join(blocks)


def events(result: TranscriptionResult, text: str) -> Iterator[str]:
    """``stream=true``: one ``transcript.text.delta`` per segment (each carrying its leading space after the
    first), then ``transcript.text.done`` with the whole text, as server-sent events."""
    items = cues(result)
    joined = ""
    for cue in items:
        delta = (" " if joined else "") + cue.text
        joined += delta
        yield _sse({"type": "transcript.text.delta", "delta": delta})
    if not items and text:
        yield _sse({"type": "transcript.text.delta", "delta": text})
    yield _sse({"type": "transcript.text.done", "text": text})


def _sse(event: dict[str, object]) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"

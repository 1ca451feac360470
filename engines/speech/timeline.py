"""From Whisper's segments to what a transcript shows: words with speakers, and the speech / music / silence
timeline that covers the whole file.

- :func:`assign_speakers`: every word gets the speaker whose diarisation turn overlaps it most.
- :func:`build_timeline`: one speech item per segment (split where the speaker changes), the music spans, and
  silence items for the gaps between them (gaps shorter than :data:`MIN_SILENCE_ITEM` are not listed).

Times are seconds from the start of the file. The output is the contract's models (``contracts.speech``).
"""

from __future__ import annotations

from contracts.speech import Segment, TimelineItem, Word
from engines.speech.diarise import Turn
from engines.speech.diarise import assign_speakers as speakers_of
from engines.speech.recognition import SpeechSegment, WordTiming
from engines.speech.screening import confidence

MIN_SILENCE_ITEM = 0.3  # seconds; shorter gaps between timeline items are not listed as silence
Span = tuple[float, float]


def join_text(segments: list[SpeechSegment]) -> str:
    """The transcript of ``segments``: the words as Whisper spaced them, else the segments' texts."""
    words = [w for s in segments for w in s.words]
    if words:
        return "".join(w.word for w in words).strip()
    return " ".join(s.text for s in segments if s.text).strip()


def outside(words: list[WordTiming], spans: list[Span]) -> list[WordTiming]:
    """The words whose middle lies in none of ``spans`` (e.g. music: never transcribed)."""
    if not spans:
        return words
    return [w for w in words if not any(s <= (w.start + w.end) / 2 <= e for s, e in spans)]


def assign_speakers(words: list[WordTiming], turns: list[Turn]) -> None:
    """Set each word's ``speaker_id`` from the diarisation ``turns`` (no turns: left unset)."""
    if not turns:
        return
    for word, speaker in zip(words, speakers_of([(w.start, w.end) for w in words], turns)):
        word.speaker_id = speaker


def word(w: WordTiming) -> Word:
    return Word(word=w.text, start_time=w.start, end_time=w.end, speaker_id=w.speaker_id, probability=w.probability)


def segment(s: SpeechSegment) -> Segment:
    return Segment(
        start_time=s.start,
        end_time=s.end,
        text=s.text,
        words=[word(w) for w in s.words],
        confidence=confidence(s.avg_logprob),
    )


def build_timeline(
    segments: list[SpeechSegment], kept_words: list[WordTiming], music: list[Span], duration: float, speakers: bool
) -> list[TimelineItem]:
    """Speech (one item per segment, split where the speaker changes), music and the silence between them.
    ``kept_words``: the words that stay in the transcript (those inside music are dropped)."""
    kept = {id(w) for w in kept_words}
    items: list[TimelineItem] = []
    for seg in segments:
        words = [w for w in seg.words if id(w) in kept]
        if not seg.words:  # no word timings: the segment as a whole (unless it lies in music)
            if seg.text and not any(s <= (seg.start + seg.end) / 2 <= e for s, e in music):
                items.append(
                    TimelineItem(
                        start_time=seg.start,
                        end_time=seg.end,
                        type="speech",
                        text=seg.text,
                        confidence=confidence(seg.avg_logprob),
                    )
                )
            continue
        run: list[WordTiming] = []
        for w in words:
            if run and speakers and w.speaker_id != run[-1].speaker_id:
                items.append(_speech_item(run, seg))
                run = []
            run.append(w)
        if run:
            items.append(_speech_item(run, seg))
    items += [TimelineItem(start_time=round(s, 3), end_time=round(e, 3), type="music") for s, e in music]
    items.sort(key=lambda i: (i.start_time, i.end_time))
    timeline: list[TimelineItem] = []
    cursor = 0.0
    for item in items:
        if item.start_time - cursor >= MIN_SILENCE_ITEM:
            timeline.append(_silence(cursor, item.start_time))
        timeline.append(item)
        cursor = max(cursor, item.end_time)
    if duration - cursor >= MIN_SILENCE_ITEM:
        timeline.append(_silence(cursor, duration))
    return timeline


def _speech_item(words: list[WordTiming], seg: SpeechSegment) -> TimelineItem:
    return TimelineItem(
        start_time=words[0].start,
        end_time=words[-1].end,
        type="speech",
        speaker_id=words[0].speaker_id,
        text="".join(w.word for w in words).strip(),
        words=[word(w) for w in words],
        confidence=confidence(seg.avg_logprob),
    )


def _silence(start: float, end: float) -> TimelineItem:
    return TimelineItem(start_time=round(start, 3), end_time=round(end, 3), type="silence")

"""An append-only transcript out of hypotheses that may still change (the Live API's transcript deltas).

Each live step re-decodes the uncommitted audio, so the text of its last words may change from one step to
the next. The Live API promises deltas that only append: joined with no separator, they are the transcript, and
nothing sent is ever taken back. So only stable text is sent:

- **agreement** (LocalAgreement, as in whisper_streaming): the words two successive hypotheses of the same audio
  agree on, from its start, beyond the words already sent, each in the newer hypothesis's spelling. Words are
  compared without case and punctuation ("However" then "However, due"), except the last word agreed on, which
  must be written the same in both: a word whose punctuation is still moving ("you?" then "you today?") waits a
  step. Words already sent are compared without case and punctuation, so a comma that appears later on one of
  them does not hold back the rest.
- **commit**: when the stream commits a segment (it ended in a pause, or the stream ended), its words beyond those
  sent are sent. The segment's text as the client has it (the words sent for it, in order) is what its completed
  event carries, so the deltas joined are always the completed segments' texts joined with spaces.

Words carry their own spaces: the first word of the session none, every later one a leading space.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.speech import Segment

_PUNCTUATION = "\"'.,;:!?()[]{}«»“”‘’…-–—¿¡"


def words_of(segments: list[Segment]) -> list[str]:
    """The words of ``segments`` in order (Whisper's word timings, else the text split at spaces)."""
    out: list[str] = []
    for segment in segments:
        tokens = [w.word for w in segment.words] if segment.words else segment.text.split()
        out += [t.strip() for t in tokens if t.strip()]
    return out


def _key(word: str) -> str:
    return word.casefold().strip(_PUNCTUATION)


def _common_prefix(a: list[str], b: list[str]) -> list[str]:
    """The words ``b`` agrees on with ``a`` from the start (without case and punctuation), in ``b``'s spelling; the
    last of them only where both spell it alike (its punctuation may still move)."""
    n = 0
    while n < min(len(a), len(b)) and _key(a[n]) == _key(b[n]):
        n += 1
    while n and a[n - 1] != b[n - 1]:
        n -= 1
    return b[:n]


@dataclass
class Completed:
    """A committed segment as the client has it: the delta that completes it (often empty: its words were sent
    already) and its text (the words sent for it)."""

    segment: Segment
    delta: str
    text: str


class AppendOnlyTranscript:
    """Turns a stream's successive hypotheses and committed segments into append-only deltas."""

    def __init__(self) -> None:
        self._started = False  # a word was sent: later ones start with a space
        self._sent: list[str] = []  # words sent whose segment is not committed yet
        self._previous: list[str] | None = None  # the last hypothesis of the uncommitted audio
        self._last_end = 0.0

    def agree(self, hypothesis: list[Segment], shown: bool = True) -> str:
        """The delta for a new hypothesis of the uncommitted audio (committed and pending segments of one step,
        before its commit): the words it and the previous one agree on, beyond those sent ("" when none).
        ``shown=False`` (a decode before the stream's language is settled): kept to agree with, never sent."""
        words = words_of(hypothesis)
        previous, self._previous = self._previous, words
        if previous is None or not shown:
            return ""
        agreed = _common_prefix(previous, words)
        sent = len(self._sent)
        if len(agreed) <= sent or [_key(w) for w in agreed[:sent]] != [_key(w) for w in self._sent]:
            return ""  # nothing new agreed, or the hypotheses moved away from what was sent: wait
        self._sent += agreed[sent:]
        return self._text(agreed[sent:])

    def commit(self, segments: list[Segment], final: bool = False) -> list[Completed]:
        """The committed ``segments``, in order, each with the delta that completes it. ``final`` (the stream
        ended): words sent that no segment took (a segment the hallucination guards dropped at the end) go to the
        last one, so every word sent belongs to a completed segment."""
        out: list[Completed] = []
        for segment in segments:
            words = words_of([segment])
            if not words:
                continue
            self._last_end = segment.end_time
            if len(self._sent) >= len(words):
                mine, self._sent, delta = self._sent[: len(words)], self._sent[len(words) :], ""
            else:
                rest = words[len(self._sent) :]
                mine, self._sent, delta = self._sent + rest, [], self._text(rest)
            if self._previous is not None:
                self._previous = self._previous[len(words) :]
            out.append(Completed(segment, delta, " ".join(mine)))
        if final and self._sent:
            if not out:
                out.append(Completed(Segment(start_time=self._last_end, end_time=self._last_end, text=""), "", ""))
            last = out[-1]
            last.text = " ".join(w for w in (last.text, *self._sent) if w)
            self._sent = []
        return out

    def _text(self, words: list[str]) -> str:
        if not words:
            return ""
        text = " ".join(words)
        if self._started:
            text = " " + text
        self._started = True
        return text

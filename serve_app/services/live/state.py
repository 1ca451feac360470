"""A live stream's state: its uncommitted audio, what it committed and withheld, and its warnings."""

from __future__ import annotations

import re

from contracts.errors import TooLarge
from contracts.speech import Segment, Withheld

SAMPLE_RATE = 16_000  # the rate of /ws/stream-transcribe; the Live API declares its own
PARTIAL_EVERY_SECONDS = 1.0  # a step (a partial, and a commit when a pause came) per this much new audio
# until the stream's first words are committed (its language settled, a first pause), within its first
# FIRST_STEPS_SECONDS, a step per this much: the language is settled, and the first words agreed on, sooner (a
# step before the language is settled is one short decode)
FIRST_STEPS_EVERY_SECONDS = 0.5
FIRST_STEPS_SECONDS = 8.0
QUIET_STEP_SECONDS = 0.25  # a client that sent audio and then nothing for this long gets a step on what it sent
# a step that is due takes in, first, up to this much more of the audio already waiting to be read (a session whose
# steps fell behind real time, or a client sending faster than it): fewer steps, each on the newest audio
CATCH_UP_SECONDS = 2.0


_NUMBERS = re.compile(r"\d+(?:[.:]\d+)*")


def _kind(warning: str) -> str:
    """A warning's kind: its text without the times and counts that differ from step to step."""
    return _NUMBERS.sub("#", warning)


class StreamState:
    """A stream's uncommitted audio (``buffer``, at ``sample_rate``), where it starts in the stream (``offset``,
    seconds), what was received in all, and the segments committed so far."""

    def __init__(self, lang_code: str | None, send_timeout_s: float = 30.0, sample_rate: int = SAMPLE_RATE) -> None:
        self.lang_code = lang_code
        self.judge = lang_code is None  # no language from the client: every segment's language is checked
        self.send_timeout_s = send_timeout_s
        self.sample_rate = sample_rate
        self.buffer = bytearray()
        self.offset = 0.0  # seconds of audio before the buffer
        self.context_seconds = 0.0  # the buffer's head that is committed already (the next commit's context)
        self.context_text = ""  # its text
        self.exact_tail: list[Segment] = []  # the last step's exact decode of the uncommitted speech, if it made one
        self.exact_until = 0.0  # seconds of the stream it covers
        self.exact_language: str | None = None  # the language it was decoded in
        self.total_bytes = 0
        self.since_partial = 0
        self.segments: list[Segment] = []
        self.withheld: list[Withheld] = []
        self._warnings: dict[str, str] = {}  # of every step (guards, uncertain language): the latest of each kind

    @property
    def bytes_per_second(self) -> int:
        return self.sample_rate * 2

    @property
    def pending_seconds(self) -> float:
        return len(self.buffer) / self.bytes_per_second

    @property
    def has_new_audio(self) -> bool:
        """Whether the buffer holds more than its committed head (the context)."""
        return self.pending_seconds > self.context_seconds

    @property
    def audio_seconds(self) -> float:
        """All the audio received, in seconds (what is metered)."""
        return self.total_bytes / self.bytes_per_second

    def committed_text(self) -> str:
        return " ".join(s.text for s in self.segments if s.text).strip()

    def given_language(self, lang_code: str) -> None:
        """The client named the language: it is used as given, and segments are no longer judged."""
        self.lang_code, self.judge = lang_code, False

    def warn(self, warnings: list[str]) -> None:
        """Keep each kind of warning once: a later one of a kind (the same text but for its times and counts)
        replaces the earlier, so a long session ends with one line per problem, not one per step."""
        for warning in warnings:
            self._warnings[_kind(warning)] = warning

    @property
    def warnings(self) -> list[str]:
        """The session's warnings: one per kind, and one for all the speech withheld."""
        out = list(self._warnings.values())
        if self.withheld:
            seconds = sum(w.end_time - w.start_time for w in self.withheld)
            likely = sorted({w.language_code for w in self.withheld if w.language_code})
            named = f" (most likely {', '.join(likely)})" if likely else ""
            out.append(
                f"{len(self.withheld)} segment(s), {seconds:.1f} s of speech, were not transcribed: they are in a "
                f"language without a speech model here{named}. {self.withheld[-1].detail}"
            )
        return out

    @property
    def quiet_s(self) -> float | None:
        """How long to wait for more audio before stepping on what came since the last step (None: nothing came)."""
        return QUIET_STEP_SECONDS if self.since_partial else None

    def catching_up(self, caught: int) -> bool:
        """Whether a step that is due should take in more waiting audio, having taken ``caught`` bytes already:
        once the language is settled (before, the first language is looked at in small steps), up to
        :data:`CATCH_UP_SECONDS`."""
        return self.lang_code is not None and caught < CATCH_UP_SECONDS * self.bytes_per_second

    def stepped(self) -> None:
        """A step covered everything received so far."""
        self.since_partial = 0

    def add_audio(self, data: bytes, limit_bytes: int) -> bool:
        """Buffer ``data``; True when a step is due. More than ``limit_bytes`` in all -> TooLarge (1009)."""
        self.buffer += data
        self.total_bytes += len(data)
        self.since_partial += len(data)
        if self.total_bytes > limit_bytes:
            raise TooLarge(f"The stream exceeds the limit of {limit_bytes // (1024 * 1024)} MB of audio.")
        first_words = not self.segments and self.audio_seconds <= FIRST_STEPS_SECONDS
        every = FIRST_STEPS_EVERY_SECONDS if first_words else PARTIAL_EVERY_SECONDS
        if self.since_partial >= every * self.bytes_per_second:
            self.since_partial = 0
            return True
        return False

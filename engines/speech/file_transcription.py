"""One audio file -> a :class:`~contracts.speech.TranscriptionResult` (the record's content; the caller builds
the record with ``contracts.speech.build_record``): :class:`FileTranscription`, which the pipeline
(``engines.speech.pipeline.TranscriptionPipeline.transcribe``) runs.

Steps of :meth:`~FileTranscription.transcribe`:

1. The requested language is checked first (:class:`UnsupportedLanguage` for an unknown code or a language
   without a model), then the file header (not audio / corrupt, empty).
2. Audio is decoded to 16 kHz mono. Without diarisation and music detection it is *streamed*: decoded in 30 s
   blocks and transcribed in windows (``engines.speech.windows``) cut in silence, so memory stays flat for any
   length. Diarisation and music detection need the whole signal (4 bytes per sample, 230 MB per hour): it is built
   from what actually decodes (never from the header's claimed duration) and capped at
   ``speech.max_whole_audio_seconds`` (:class:`TooLarge` beyond it).
3. Music detection (``engines.speech.music``, optional): music spans are silenced before the VAD, so they are never
   decoded as words; they appear in the timeline (``type: music``) and in ``warnings``.
4. The VAD (``engines.speech.vad``) finds speech; only speech is decoded, with word timestamps, by the recognizer
   of the language's route (``Recognizer.transcribe``: Whisper, a CTC model, any family), and screened by that
   family's guards (``Recognizer.screen``).
5. Language: the requested one, or auto-detected (``LanguageChoice.decide``) and confirmed on the transcript
   with the text language identifier (``engines.text.langid``, optional).
6. Diarisation (``engines.speech.diarise``, optional): speaker turns over the VAD speech; every word gets a speaker.
7. The timeline (``engines.speech.timeline``): speech / music / silence items in time order.

Translation of the transcript is not done here: the Speech deployment asks the Translation deployment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from contracts.errors import InvalidInput, TimedOut
from contracts.languages import LISTED_TRANSCRIPTION_CODES
from contracts.languages import speech_name as language_name
from contracts.settings import SpeechSettings
from contracts.speech import TranscriptionResult
from engines.speech import diarise as diarisation
from engines.speech import music as music_detection
from engines.speech.audio import SAMPLE_RATE, iter_audio, load_audio, probe
from engines.speech.language_choice import LANGID_CONFIDENCE, UNCERTAIN_DETECTION, LanguageChoice
from engines.speech.listing import SETTING, quality_warning
from engines.speech.recognition import Detection, Route, SpeechSegment
from engines.speech.routing import SpeechModels
from engines.speech.timeline import assign_speakers, build_timeline, join_text, outside, word
from engines.speech.vad import Vad
from engines.speech.windows import Window, array_blocks, speech_only, windows

log = logging.getLogger(__name__)


@dataclass
class _Pass:
    """What one transcription pass over the audio produced."""

    route: Route | None = None
    detection: Detection | None = None
    segments: list[SpeechSegment] = field(default_factory=list)
    speech: list[tuple[float, float]] = field(default_factory=list)  # VAD speech spans, seconds
    samples: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return join_text(self.segments)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


class FileTranscription:
    """Transcribes files into :class:`TranscriptionResult` with a pipeline's language ``choice`` (and its speech
    models), ``vad`` and ``transcription`` settings; thread-safe."""

    def __init__(self, choice: LanguageChoice, speech: SpeechSettings, vad: Vad) -> None:
        self.choice = choice
        self.vad = vad
        self.window_seconds = speech.window_seconds
        self.diarisation_threshold = speech.diarisation_threshold
        self.max_whole_audio_seconds = speech.max_whole_audio_seconds

    @property
    def models(self) -> SpeechModels:
        return self.choice.models

    def transcribe(
        self,
        path: Path | str,
        language: str | None = None,
        diarise: bool = False,
        detect_music: bool = False,
        *,
        timeout_s: float | None = None,
    ) -> TranscriptionResult:
        """What transcribing the file at ``path`` produced.

        Raises domain errors: :class:`UnsupportedLanguage` / :class:`InvalidInput` (bad language, empty audio),
        :class:`UnsupportedMedia` (not audio), :class:`Unavailable` (a model cannot load), :class:`TimedOut`
        (past ``timeout_s``), :class:`TooLarge` (diarisation or music detection on audio that decodes to more than
        ``max_whole_audio_seconds``).
        """
        started = time.time()
        deadline = started + timeout_s if timeout_s else None
        path = Path(path)
        requested = self.models.route(language) if language else None
        info = probe(path)
        warnings: list[str] = []
        music: list[tuple[float, float]] = []
        audio: np.ndarray | None = None
        if diarise or detect_music:
            audio = load_audio(path, info, max_seconds=self.max_whole_audio_seconds)
            if detect_music:
                music = self._detect_music(audio, warnings)
                for start, end in music:  # silence music so neither the VAD nor a model hears it
                    audio[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)] = 0.0

        def file_windows() -> Iterator[Window]:
            blocks = array_blocks(audio) if audio is not None else iter_audio(path, 30.0, info)
            return windows(blocks, self.window_seconds, self.vad)

        result = self._pass(file_windows, requested, deadline)
        if result.samples == 0:
            raise InvalidInput("The audio file contains no samples (zero-length audio).")
        if requested is None and result.route is not None:
            result = self._confirm_language(result, file_windows, deadline)

        words = outside([w for s in result.segments for w in s.words], music)
        if audio is not None and diarise:
            assign_speakers(words, diarisation.diarise(audio, result.speech, threshold=self.diarisation_threshold))
        duration = round(result.samples / SAMPLE_RATE, 3)
        text = "".join(w.word for w in words).strip() if words else join_text(result.segments)
        code = result.route.code if result.route else "und"  # no route: no speech to detect a language in
        warnings = info.warnings + warnings + result.warnings
        poor = quality_warning(result.route) if result.route else None
        if poor and text:
            warnings.append(poor)
        if not text:
            warnings.append("No speech was recognised in the audio.")
        return TranscriptionResult(
            file_size=info.size_bytes,
            audio_length_seconds=duration,
            sample_rate=info.sample_rate,
            channels=info.channels,
            frame_rate=info.frame_rate,
            mime_type=info.mime_type,
            language_code=code,
            language_probability=round(result.detection.probability, 4) if result.detection else None,
            language_detected_by=result.detection.signal if result.detection else None,
            text=text,
            words=[word(w) for w in words],
            diarised=diarise,
            timeline=build_timeline(result.segments, words, music, duration, diarise),
            warnings=warnings,
            model=result.route.recognizer.served(result.route).model if result.route else self.models.model_name,
            processing_seconds=round(time.time() - started, 3),
        )

    # ------------------------------------------------------------------ passes

    def _pass(
        self,
        file_windows: Callable[[], Iterator[Window]],
        route: Route | None,
        deadline: float | None,
        detection: Detection | None = None,
    ) -> _Pass:
        result = _Pass(route=route, detection=detection)
        for window in file_windows():
            _check_deadline(deadline)
            result.samples = window.offset + window.audio.size
            start_s = window.start_seconds
            result.speech += [
                (round(start_s + c["start"] / SAMPLE_RATE, 3), round(start_s + c["end"] / SAMPLE_RATE, 3))
                for c in window.chunks
            ]
            if not window.chunks:
                continue
            if result.route is None:
                result.detection, result.route = self._choose_language(window, result.warnings)
            result.segments += result.route.recognizer.transcribe(
                window.audio, result.route, window.chunks, offset=start_s, deadline=deadline
            )
        if result.route is not None:
            result.segments, found = result.route.recognizer.screen(result.segments)
            result.warnings += found
        return result

    # ------------------------------------------------------------------ language choice

    def _choose_language(self, window: Window, warnings: list[str]) -> tuple[Detection | None, Route]:
        """Auto-detection on the first window with speech (``LanguageChoice.decide``)."""
        return self.choice.decide(speech_only(window.audio, window.chunks), warnings)

    def _confirm_language(
        self, result: _Pass, file_windows: Callable[[], Iterator[Window]], deadline: float | None
    ) -> _Pass:
        """Check an uncertain audio detection against the transcript's text language; re-run once if the
        text is clearly in another language that has a model."""
        detection, route, text = result.detection, result.route, result.text
        if route is None or detection is None or detection.probability >= UNCERTAIN_DETECTION or len(text.split()) < 4:
            return result
        chosen = route.code
        guess = self.choice.text_language(text)
        if guess is None:
            return result
        language, confidence = guess
        routes = self.models.routes()
        if language == chosen or confidence < LANGID_CONFIDENCE:
            return result
        if language not in routes:
            name = language_name(language) if language in LISTED_TRANSCRIPTION_CODES else language
            result.warnings.append(
                f"The transcript looks like {name}, which has no speech model here "
                f"({SETTING}); it was transcribed as {chosen}."
            )
            return result
        log.info("language %s (p=%.2f) overruled by text LID %s (%.2f)", chosen, detection.probability, *guess)
        signal = f"{route.recognizer.family} transcript + text language id"  # the route's model's transcript was read
        found = Detection(language, confidence, [guess], signal=signal)
        again = self._pass(file_windows, routes[language], deadline, found)
        again.warnings.insert(
            0,
            f"Audio language detection was uncertain ({chosen}, p={detection.probability:.2f});"
            f" the transcript's language ({language}) was used.",
        )
        return again

    # ------------------------------------------------------------------ music

    @staticmethod
    def _detect_music(audio: np.ndarray, warnings: list[str]) -> list[tuple[float, float]]:
        spans = [(float(s), float(e)) for s, e in music_detection.detect_music(audio)]
        if spans:
            total = sum(e - s for s, e in spans)
            where = ", ".join(f"{_clock(s)}-{_clock(e)}" for s, e in spans[:10])
            more = f" and {len(spans) - 10} more" if len(spans) > 10 else ""
            warnings.append(
                f"Music detected (e.g. music on hold) in {len(spans)} span(s), {total:.1f} s in all: "
                f"{where}{more}; music is not transcribed."
            )
        return spans


# ---------------------------------------------------------------------------------------------- helpers


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.time() > deadline:
        raise TimedOut("Transcription took longer than the time limit.")

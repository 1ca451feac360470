"""One audio file -> the full transcription record (every field of the spec plus our additions).

:class:`TranscriptionPipeline` is plain Python (no Ray, no HTTP): the Transcription deployment, the async job
worker and the batch Ray tasks all call :meth:`TranscriptionPipeline.transcribe`; :func:`get_pipeline` keeps one
per process and model configuration, so models load once per process.

Steps of :meth:`~TranscriptionPipeline.transcribe`:

1. ``lang_code`` is checked first (400 for an unknown code or a language without a model), then the file header
   (415 not audio / corrupt, 400 empty).
2. Audio is decoded to 16 kHz mono. Without diarisation and music detection it is *streamed*: decoded in 30 s
   blocks and transcribed in windows of ``transcribe_window_seconds`` cut in silence, so memory stays flat for
   any length. Diarisation and music detection need the whole signal (4 bytes per sample, 230 MB per hour).
3. Music detection (``engines.music``, optional): music spans are silenced before the VAD, so they are never
   decoded as words; they appear in the timeline (``type: music``) and in ``warnings``.
4. Silero VAD finds speech; only speech is decoded by Whisper, with word timestamps.
5. Language: the requested one, or auto-detected (see :meth:`_choose_language`) and confirmed on the transcript
   with the text language identifier (``engines.langid``, optional).
6. Diarisation (``engines.diarise``, optional): speaker turns over the VAD speech; every word gets a speaker.
7. Translation to English (optional callable), else a warning.

The record's ``diarisation_result`` holds per-word arrays ``starts``/``ends``/``speaker_ids``/``words`` (empty
when diarisation is off, as the spec says) and our ``timeline``: speech/music/silence items in time order.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engines.asr import (DEFAULT_MODEL, LANGUAGES, SETTING, Detection, Route, SpeechRecognizer, SpeechSegment,
                         WordTiming, normalise_code)
from engines.audio import SAMPLE_RATE, iter_audio, load_audio, probe
from contracts.errors import DomainError, InvalidInput, TimedOut
from contracts.settings import Settings

log = logging.getLogger("khuluma.pipeline")

MIN_SILENCE_ITEM = 0.3  # seconds; shorter gaps between timeline items are not listed as silence
_CUT_SEARCH_SECONDS = 60.0  # a window is cut in the longest-lasting silence of its last minute
LANGID_CONFIDENCE = 0.75  # text-LID confidence needed to overrule an uncertain audio detection
UNCERTAIN_DETECTION = 0.75  # audio detections below this are checked against the text
TranslateFn = Callable[[str, str], str]


@dataclass
class _Window:
    offset: int  # samples from the start of the file
    audio: np.ndarray
    chunks: list[dict[str, int]]  # VAD speech chunks, samples relative to ``audio``


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
        return _join(self.segments)


def _join(segments: list[SpeechSegment]) -> str:
    words = [w for s in segments for w in s.words]
    if words:
        return "".join(w.word for w in words).strip()
    return " ".join(s.text for s in segments if s.text).strip()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


def _optional(module: str, attribute: str) -> Callable[..., Any] | None:
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        log.warning("%s.%s unavailable: %s", module, attribute, exc)
        return None


class _LanguageIdentifier:
    """The text language identifier (engines.langid), loaded once per process on first use; None if absent."""

    _instance: Any = None
    _failed = False
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> Any:
        if cls._instance is None and not cls._failed:
            with cls._lock:
                if cls._instance is None and not cls._failed:
                    try:
                        from engines.langid import LanguageIdentifier

                        cls._instance = LanguageIdentifier()
                    except Exception as exc:  # noqa: BLE001 - optional: detection works without it
                        log.warning("text language identifier unavailable: %s", exc)
                        cls._failed = True
        return cls._instance


class TranscriptionPipeline:
    """Transcribes files into transcription records; thread-safe, one per process is enough."""

    def __init__(self, settings: Settings | dict[str, Any] | None = None,
                 recognizer: SpeechRecognizer | None = None) -> None:
        if isinstance(settings, dict) or settings is None:
            settings = Settings(**(settings or {}))
        self.settings = settings
        self._recognizer = recognizer
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ model

    @property
    def recognizer(self) -> SpeechRecognizer:
        if self._recognizer is None:
            with self._lock:
                if self._recognizer is None:
                    self._recognizer = build_recognizer(self.settings)
        return self._recognizer

    @property
    def model_name(self) -> str:
        return self.settings.whisper.model or "whisper-base"

    def warm_up(self) -> None:
        """Load the default model now (deployments call this at start so the first request is not slow)."""
        self.recognizer.model(DEFAULT_MODEL)

    def languages(self) -> list[dict[str, Any]]:
        """Per-language truth for ``GET /api/v1/models``."""
        routes = self.recognizer.routes()
        out = []
        for code, lang in LANGUAGES.items():
            route = routes.get(code)
            if route is None:
                target = "zul" if code == "cs-zul" else code
                out.append({"code": code, "name": lang.name, "supported": False, "model": None,
                            "note": f"Whisper base has no {LANGUAGES[target].name}; configure a model with "
                                    f"{SETTING}='{{\"{target}\": \"<dir or HF id>\"}}'."})
                continue
            model = self.model_name if route.model_key == DEFAULT_MODEL else route.model_ref
            note = None
            if code == "cs-zul" and route.model_key != "cs-zul":
                note = "Runs on the isiZulu model."
            elif route.whisper_language is None:
                note = "Auto-detection reaches it only through the text language identifier."
            out.append({"code": code, "name": lang.name, "supported": True, "model": model, "note": note})
        for code, route in routes.items():
            if code not in LANGUAGES:
                out.append({"code": code, "name": code, "supported": True, "model": route.model_ref,
                            "note": f"Configured in {SETTING}."})
        return out

    # ------------------------------------------------------------------ the file route

    def transcribe(
        self,
        path: Path | str,
        lang_code: str | None = None,
        diarise: bool = False,
        detect_music: bool = False,
        translate_to_english: TranslateFn | None = None,
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """The transcription record of one file (without ``id`` / customer fields: the caller adds them).

        Raises :class:`~serve_app.errors.DomainError` (400/415 bad input, 503 model unavailable, 504 past
        ``timeout_s``). :meth:`transcribe_or_fail` returns a FAILED record instead.
        """
        started = time.time()
        deadline = started + timeout_s if timeout_s else None
        path = Path(path)
        requested = self.recognizer.route(lang_code) if lang_code else None
        info = probe(path)
        warnings: list[str] = []
        music: list[tuple[float, float]] = []
        audio: np.ndarray | None = None
        if diarise or detect_music:
            audio = load_audio(path, info)
            if detect_music:
                music = self._detect_music(audio, warnings)
                for start, end in music:  # silence music so neither VAD nor Whisper sees it
                    audio[int(start * SAMPLE_RATE):int(end * SAMPLE_RATE)] = 0.0

        def windows() -> Iterator[_Window]:
            blocks = _array_blocks(audio) if audio is not None else iter_audio(path, 30.0, info)
            return self._windows(blocks)

        result = self._pass(windows, requested, deadline)
        if result.samples == 0:
            raise InvalidInput("The audio file contains no samples (zero-length audio).")
        if requested is None and result.route is not None:
            result = self._confirm_language(result, windows, deadline)

        words = [w for s in result.segments for w in s.words]
        if music:
            words = [w for w in words if not _inside(w, music)]
        speakers_on = False
        if diarise:
            speakers_on = self._diarise(audio, result.speech, words, warnings)  # type: ignore[arg-type]
        duration = round(result.samples / SAMPLE_RATE, 3)
        text = "".join(w.word for w in words).strip() if words else _join(result.segments)
        language = result.route.code if result.route else (normalise_code(lang_code) if lang_code else "und")
        warnings = info.warnings + warnings + result.warnings
        if not text:
            warnings.append("No speech was recognised in the audio.")
        translation = None
        if translate_to_english is not None and text:
            translation = self._translate(text, language, translate_to_english, warnings)
        timeline = build_timeline(result.segments, words, music, duration, speakers_on)
        return {
            "storage_url": None,
            "container_name": "",
            "blob_name": path.name,
            "upload_file_size": info.size_bytes,
            "audio_length_seconds": duration,
            "sample_rate": info.sample_rate,
            "channels": info.channels,
            "frame_rate": info.frame_rate,
            "mime_type": info.mime_type,
            "language_code": language,
            "diarisation_result": {
                "starts": [w.start for w in words] if speakers_on else [],
                "ends": [w.end for w in words] if speakers_on else [],
                "speaker_ids": [w.speaker_id or "" for w in words] if speakers_on else [],
                "words": [w.text for w in words] if speakers_on else [],
                "timeline": timeline,
            },
            "transcription_text": text,
            "transcription_status": "COMPLETED",
            "error_message": None,
            "warnings": warnings,
            "words": [_word_dict(w) for w in words],
            "translation": translation,
            "language_probability": round(result.detection.probability, 4) if result.detection else None,
            "model": self.model_name if not result.route or result.route.model_key == DEFAULT_MODEL
            else result.route.model_ref,
            "processing_seconds": round(time.time() - started, 3),
        }

    def transcribe_or_fail(self, path: Path | str, lang_code: str | None = None, diarise: bool = False,
                           detect_music: bool = False, translate_to_english: TranslateFn | None = None,
                           *, timeout_s: float | None = None) -> dict[str, Any]:
        """Like :meth:`transcribe`, but a failure is a record with ``transcription_status: FAILED``."""
        try:
            return self.transcribe(path, lang_code, diarise, detect_music, translate_to_english,
                                   timeout_s=timeout_s)
        except DomainError as exc:
            return failed_record(Path(path), exc.detail, lang_code)
        except Exception as exc:  # noqa: BLE001
            log.exception("transcription of %s failed", path)
            return failed_record(Path(path), f"Transcription failed: {type(exc).__name__}: {exc}", lang_code)

    # ------------------------------------------------------------------ streaming (arrays of PCM)

    def transcribe_array(self, audio: np.ndarray, lang_code: str | None = None, *, offset: float = 0.0,
                         commit_before: float | None = None) -> dict[str, Any]:
        """Transcribe an in-memory 16 kHz buffer (streaming). ``commit_before`` (seconds into ``audio``):
        segments ending before it are final; the answer says where the caller may cut (``cut_seconds``: the
        middle of the last silence before ``commit_before``, or 0 when there is none)."""
        route = self.recognizer.route(lang_code) if lang_code else None
        chunks = self.recognizer.speech_chunks(audio)
        detection = None
        if route is None:
            detection = self.recognizer.detect(_speech_only(audio, chunks)) if chunks else None
            route = self.recognizer.route(detection.code if detection else "eng")
        cut = 0
        if commit_before is not None and chunks:
            limit = int(commit_before * SAMPLE_RATE)
            gaps = [(chunks[i]["end"], chunks[i + 1]["start"]) for i in range(len(chunks) - 1)
                    if chunks[i + 1]["start"] <= limit]
            if chunks[-1]["end"] < limit:
                gaps.append((chunks[-1]["end"], limit))
            if gaps:
                a, b = gaps[-1]
                cut = (a + b) // 2
        segments = list(self.recognizer.transcribe(audio, route, chunks, offset=offset))
        cut_s = cut / SAMPLE_RATE
        final = [s for s in segments if cut and s.end <= offset + cut_s]
        pending = [s for s in segments if not (cut and s.end <= offset + cut_s)]
        return {
            "language_code": route.code,
            "language_probability": round(detection.probability, 4) if detection else None,
            "cut_seconds": round(cut_s, 3),
            "final": [_segment_dict(s) for s in final],
            "pending": [_segment_dict(s) for s in pending],
            "pending_text": _join(pending),
        }

    # ------------------------------------------------------------------ passes and windows

    def _windows(self, blocks: Iterator[np.ndarray]) -> Iterator[_Window]:
        """Group 30 s blocks into windows of about ``transcribe_window_seconds``, cut in silence."""
        size = int(self.settings.transcription.window_seconds * SAMPLE_RATE)
        vad = self.recognizer.speech_chunks
        pending: list[np.ndarray] = []
        pending_samples = 0
        offset = 0
        for block in blocks:
            pending.append(block)
            pending_samples += block.size
            if pending_samples < size:
                continue
            buffer = np.concatenate(pending)
            chunks = vad(buffer)
            cut = _silence_cut(chunks, buffer.size)
            yield _Window(offset, buffer[:cut], _clip(chunks, cut))
            offset += cut
            rest = buffer[cut:].copy()
            pending, pending_samples = ([rest], rest.size) if rest.size else ([], 0)
            del buffer
        if pending_samples:
            buffer = np.concatenate(pending)
            yield _Window(offset, buffer, vad(buffer))

    def _pass(self, windows: Callable[[], Iterator[_Window]], route: Route | None, deadline: float | None,
              detection: Detection | None = None) -> _Pass:
        result = _Pass(route=route, detection=detection)
        for window in windows():
            _check_deadline(deadline)
            result.samples = window.offset + window.audio.size
            start_s = window.offset / SAMPLE_RATE
            result.speech += [(round(start_s + c["start"] / SAMPLE_RATE, 3), round(start_s + c["end"] / SAMPLE_RATE, 3))
                              for c in window.chunks]
            if not window.chunks:
                continue
            if result.route is None:
                result.detection, result.route = self._choose_language(window, result.warnings)
            result.segments += self.recognizer.transcribe(window.audio, result.route, window.chunks,
                                                          offset=start_s, deadline=deadline)
        return result

    def _choose_language(self, window: _Window, warnings: list[str]) -> tuple[Detection | None, Route]:
        """Auto-detection: Whisper's language detection restricted to languages that have a model; when
        languages Whisper has no token for (isiZulu, Sesotho) are configured, a short unforced first pass is
        checked by the text language identifier."""
        recognizer = self.recognizer
        speech = _speech_only(window.audio, window.chunks)
        detection = recognizer.detect(speech)
        routes = recognizer.routes()
        tokenless = [c for c, r in routes.items() if r.whisper_language is None and c != "cs-zul"]
        if tokenless:
            guess = self._probe_tokenless(speech, tokenless)
            if guess is not None:
                return Detection(guess[0], guess[1], [guess]), routes[guess[0]]
        if detection is None:
            warnings.append("The language could not be detected; English was assumed.")
            return None, routes["eng"]
        return detection, routes[detection.code]

    def _probe_tokenless(self, speech: np.ndarray, tokenless: list[str]) -> tuple[str, float] | None:
        identifier = _LanguageIdentifier.get()
        if identifier is None:
            return None
        model = self.recognizer.model(DEFAULT_MODEL)
        segments, _ = model.transcribe(np.ascontiguousarray(speech[: 30 * SAMPLE_RATE]), beam_size=1,
                                       temperature=0.0, condition_on_previous_text=False, vad_filter=False)
        text = " ".join(s.text for s in segments).strip()
        if len(text.split()) < 3:
            return None
        guess = identifier.detect(text)
        if guess.language in tokenless and guess.confidence >= 0.5:
            return guess.language, float(guess.confidence)
        return None

    def _confirm_language(self, result: _Pass, windows: Callable[[], Iterator[_Window]],
                          deadline: float | None) -> _Pass:
        """Check an uncertain audio detection against the transcript's text language; re-run once if the
        text is clearly in another language that has a model."""
        detection = result.detection
        chosen = result.route.code if result.route else ""
        text = result.text
        if detection is None or detection.probability >= UNCERTAIN_DETECTION or len(text.split()) < 4:
            return result
        identifier = _LanguageIdentifier.get()
        if identifier is None:
            return result
        guess = identifier.detect(text)
        routes = self.recognizer.routes()
        if guess.language == chosen or guess.confidence < LANGID_CONFIDENCE:
            return result
        if guess.language not in routes:
            name = LANGUAGES[guess.language].name if guess.language in LANGUAGES else guess.language
            result.warnings.append(f"The transcript looks like {name}, which has no speech model here "
                                   f"({SETTING}); it was transcribed as {chosen}.")
            return result
        log.info("language %s (p=%.2f) overruled by text LID %s (%.2f)", chosen, detection.probability,
                 guess.language, guess.confidence)
        again = self._pass(windows, routes[guess.language], deadline,
                           Detection(guess.language, float(guess.confidence), [(guess.language, guess.confidence)]))
        again.warnings.insert(0, f"Audio language detection was uncertain ({chosen}, p={detection.probability:.2f});"
                                 f" the transcript's language ({guess.language}) was used.")
        return again

    # ------------------------------------------------------------------ optional stages

    def _detect_music(self, audio: np.ndarray, warnings: list[str]) -> list[tuple[float, float]]:
        detect = _optional("engines.music", "detect_music")
        if detect is None:
            warnings.append("Music detection is not available in this build (engines.music missing); "
                            "music was not detected.")
            return []
        spans = [(float(s), float(e)) for s, e in detect(audio)]
        if spans:
            total = sum(e - s for s, e in spans)
            where = ", ".join(f"{_clock(s)}-{_clock(e)}" for s, e in spans[:10])
            more = f" and {len(spans) - 10} more" if len(spans) > 10 else ""
            warnings.append(f"Music detected (e.g. music on hold) in {len(spans)} span(s), {total:.1f} s in all: "
                            f"{where}{more}; music is not transcribed.")
        return spans

    def _diarise(self, audio: np.ndarray, speech: list[tuple[float, float]], words: list[WordTiming],
                 warnings: list[str]) -> bool:
        diarise = _optional("engines.diarise", "diarise")
        if diarise is None:
            warnings.append("Diarisation is not available in this build (engines.diarise missing); "
                            "speaker ids are not set.")
            return False
        kwargs: dict[str, Any] = {}
        if "threshold" in inspect.signature(diarise).parameters:
            kwargs["threshold"] = self.settings.transcription.diarisation_threshold
        turns = diarise(audio, speech, **kwargs)
        if not turns:
            return True
        for word, speaker in zip(words, assign_speakers([(w.start, w.end) for w in words], turns)):
            word.speaker_id = speaker
        return True

    @staticmethod
    def _translate(text: str, language: str, translate: TranslateFn, warnings: list[str]) -> str | None:
        if language == "eng":
            return text
        try:
            return translate(text, language)
        except DomainError as exc:
            warnings.append(f"Translation to English is not available: {exc.detail}")
        except Exception as exc:  # noqa: BLE001 - translation is an extra; the transcript stands
            warnings.append(f"Translation to English failed: {type(exc).__name__}: {exc}")
        return None


# ---------------------------------------------------------------------------------------------- helpers


def build_recognizer(settings: Settings) -> SpeechRecognizer:
    from engines.whisper_weights import ensure_whisper_base

    model = settings.whisper.model or ensure_whisper_base(settings.data_dir)
    return SpeechRecognizer(
        model,
        settings.whisper.language_models,
        default_model_name=settings.whisper.model or "whisper-base",
        device=settings.whisper.device,
        compute_type=settings.whisper.compute_type,
        cpu_threads=settings.whisper.cpu_threads,
        beam_size=settings.whisper.beam_size,
        temperature_fallback=settings.whisper.temperature_fallback,
        seed=settings.whisper.seed,
    )


_pipelines: dict[str, TranscriptionPipeline] = {}
_pipelines_lock = threading.Lock()
_PIPELINE_KEYS = {"data_dir", "whisper_model", "whisper_language_models", "whisper_compute_type", "whisper_device",
                  "whisper_cpu_threads", "whisper_beam_size", "whisper_temperature_fallback", "whisper_seed",
                  "transcribe_window_seconds", "diarisation_threshold"}


def get_pipeline(settings: Settings | dict[str, Any] | None = None) -> TranscriptionPipeline:
    """One pipeline per process and model configuration (what Ray tasks and deployments should use)."""
    if not isinstance(settings, Settings):
        settings = Settings(**(settings or {}))
    key = settings.model_dump_json(include=_PIPELINE_KEYS & set(Settings.model_fields))
    with _pipelines_lock:
        pipeline = _pipelines.get(key)
        if pipeline is None:
            pipeline = _pipelines[key] = TranscriptionPipeline(settings)
    return pipeline


def failed_record(path: Path, message: str, lang_code: str | None = None) -> dict[str, Any]:
    size = path.stat().st_size if path.exists() else None
    return {"storage_url": None, "container_name": "", "blob_name": path.name, "upload_file_size": size,
            "audio_length_seconds": 0.0, "language_code": lang_code or "", "transcription_text": "",
            "diarisation_result": {"starts": [], "ends": [], "speaker_ids": [], "words": [], "timeline": []},
            "transcription_status": "FAILED", "error_message": message, "warnings": [], "words": []}


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.time() > deadline:
        raise TimedOut("Transcription took longer than the time limit.")


def _array_blocks(audio: np.ndarray, block_seconds: float = 30.0) -> Iterator[np.ndarray]:
    step = int(block_seconds * SAMPLE_RATE)
    for start in range(0, audio.size, step):
        yield audio[start:start + step]


def _speech_only(audio: np.ndarray, chunks: list[dict[str, int]], limit_s: float = 30.0) -> np.ndarray:
    parts, total = [], 0
    for c in chunks:
        parts.append(audio[c["start"]:c["end"]])
        total += c["end"] - c["start"]
        if total >= limit_s * SAMPLE_RATE:
            break
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def _silence_cut(chunks: list[dict[str, int]], size: int) -> int:
    """Where to end a full window: the middle of the longest silence in its last minute (the window end when
    it has none, e.g. a minute of unbroken speech)."""
    floor = max(size // 2, size - int(_CUT_SEARCH_SECONDS * SAMPLE_RATE))
    gaps = [(chunks[i]["end"], chunks[i + 1]["start"]) for i in range(len(chunks) - 1)]
    gaps.append((chunks[-1]["end"], size) if chunks else (0, size))
    candidates = [(b - a, (a + b) // 2) for a, b in gaps if (a + b) // 2 >= floor and b - a >= SAMPLE_RATE // 5]
    if not candidates:
        return size
    return max(candidates)[1]


def _clip(chunks: list[dict[str, int]], cut: int) -> list[dict[str, int]]:
    out = []
    for c in chunks:
        if c["start"] >= cut:
            break
        out.append({"start": c["start"], "end": min(c["end"], cut)})
    return out


def _inside(word: WordTiming, spans: list[tuple[float, float]]) -> bool:
    middle = (word.start + word.end) / 2
    return any(s <= middle <= e for s, e in spans)


def assign_speakers(words: list[tuple[float, float]], turns: list[tuple[float, float, str]]) -> list[str | None]:
    """Speaker of each word: the turn overlapping it most, else the nearest turn."""
    helper = _optional("engines.diarise", "assign_speakers")
    if helper is not None:
        return helper(words, turns)
    out: list[str | None] = []
    for start, end in words:
        best = max(turns, key=lambda t: (min(end, t[1]) - max(start, t[0]), -abs((t[0] + t[1]) / 2 - start)))
        out.append(best[2])
    return out


def _word_dict(w: WordTiming) -> dict[str, Any]:
    return {"word": w.text, "start_time": w.start, "end_time": w.end, "speaker_id": w.speaker_id,
            "probability": w.probability}


def _segment_dict(s: SpeechSegment) -> dict[str, Any]:
    return {"start_time": s.start, "end_time": s.end, "text": s.text, "words": [_word_dict(w) for w in s.words]}


def build_timeline(segments: list[SpeechSegment], kept_words: list[WordTiming], music: list[tuple[float, float]],
                   duration: float, speakers: bool) -> list[dict[str, Any]]:
    """Speech (one item per segment, split where the speaker changes), music and the silence between them."""
    kept = {id(w) for w in kept_words}
    items: list[dict[str, Any]] = []
    for segment in segments:
        words = [w for w in segment.words if id(w) in kept]
        if not segment.words:  # no word timings: the segment as a whole (unless it lies in music)
            if segment.text and not any(s <= (segment.start + segment.end) / 2 <= e for s, e in music):
                items.append({"start_time": segment.start, "end_time": segment.end, "type": "speech",
                              "speaker_id": None, "text": segment.text, "words": []})
            continue
        run: list[WordTiming] = []
        for word in words:
            if run and speakers and word.speaker_id != run[-1].speaker_id:
                items.append(_speech_item(run))
                run = []
            run.append(word)
        if run:
            items.append(_speech_item(run))
    items += [{"start_time": round(s, 3), "end_time": round(e, 3), "type": "music", "speaker_id": None,
               "text": "", "words": []} for s, e in music]
    items.sort(key=lambda i: (i["start_time"], i["end_time"]))
    timeline: list[dict[str, Any]] = []
    cursor = 0.0
    for item in items:
        if item["start_time"] - cursor >= MIN_SILENCE_ITEM:
            timeline.append(_silence(cursor, item["start_time"]))
        timeline.append(item)
        cursor = max(cursor, item["end_time"])
    if duration - cursor >= MIN_SILENCE_ITEM:
        timeline.append(_silence(cursor, duration))
    return timeline


def _speech_item(words: list[WordTiming]) -> dict[str, Any]:
    return {"start_time": words[0].start, "end_time": words[-1].end, "type": "speech",
            "speaker_id": words[0].speaker_id, "text": "".join(w.word for w in words).strip(),
            "words": [_word_dict(w) for w in words]}


def _silence(start: float, end: float) -> dict[str, Any]:
    return {"start_time": round(start, 3), "end_time": round(end, 3), "type": "silence", "speaker_id": None,
            "text": "", "words": []}

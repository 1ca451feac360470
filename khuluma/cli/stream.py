"""``khuluma stream FILE|-``: live transcription from the terminal, through ``/ws/stream-transcribe``.

A file (any format the service reads) is decoded here and sent at real time (``--speed 1``) in 100 ms frames, as
a microphone would send it; ``-`` reads raw PCM (signed 16-bit little-endian, 16 kHz, mono) from standard input,
for example ``arecord -f S16_LE -r 16000 -c 1 - | khuluma stream -``. Partial text is shown in place (grey, it may
still change); finished segments are printed as lines. ``--json`` prints every event of the protocol as one JSON
line instead (see docs/speech.md). :func:`run_stream` is the client itself; the streaming bench uses it too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

SAMPLE_RATE = 16_000
BYTES_PER_SECOND = SAMPLE_RATE * 2
FRAME_BYTES = BYTES_PER_SECOND // 10  # 100 ms

console = Console(stderr=True)


class StreamError(Exception):
    """The stream could not run: the service is unreachable, refused the token, or answered an error event."""


@dataclass
class StreamOutcome:
    """Every event with the second it arrived (from the start), when the last audio went out, how much audio."""

    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    audio_seconds: float = 0.0
    audio_sent_at: float = 0.0

    @property
    def final(self) -> dict[str, Any] | None:
        return next((e for _, e in reversed(self.events) if e.get("type") in DONE_EVENTS), None)

    @property
    def final_at(self) -> float | None:
        return next((t for t, e in reversed(self.events) if e.get("type") in DONE_EVENTS), None)

    @property
    def first_text_at(self) -> float | None:
        """When the first transcript text arrived (a partial, a segment or a Live API delta)."""
        return next(
            (t for t, e in self.events if e.get("type") in TEXT_EVENTS and (e.get("text") or e.get("delta"))), None
        )

    @property
    def started_at(self) -> float:
        """When the server said it was ready for audio."""
        return next((t for t, e in self.events if e.get("type") in START_EVENTS), 0.0)


# /ws/stream-transcribe's events and the Live API's (/v1/realtime)
START_EVENTS = ("ready", "session.created")
DONE_EVENTS = ("final", "session.closed")
TEXT_EVENTS = ("partial", "segment", "final", "session.input_transcript.delta")
WITHHELD_EVENTS = ("withheld", "session.input_transcript.withheld")  # speech in a language without a model


def file_frames(path: Path) -> list[bytes]:
    """A file decoded to 16 kHz mono s16le, in 100 ms frames."""
    import numpy as np

    from engines.speech.audio import load_audio

    pcm = (np.clip(load_audio(path), -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return [pcm[i : i + FRAME_BYTES] for i in range(0, len(pcm), FRAME_BYTES)]


def stdin_frames() -> Iterator[bytes]:
    """Raw PCM from standard input, as it comes (whole samples only)."""
    carry = b""
    while chunk := sys.stdin.buffer.read(FRAME_BYTES):
        data = carry + chunk
        whole = len(data) - len(data) % 2
        carry = data[whole:]
        if whole:
            yield data[:whole]


def stream_url(url: str, lang: str | None) -> str:
    base = url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return f"{base}/ws/stream-transcribe" + (f"?lang_code={quote(lang)}" if lang else "")


def mint_live_secret(url: str, token: str, lang: str | None) -> str:
    """A one-session Live API secret (``POST /v1/realtime/client_secrets``); raises :class:`StreamError`."""
    import httpx

    session: dict[str, Any] = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": SAMPLE_RATE}}}}
    if lang:
        session["audio"]["input"]["transcription"] = {"language": lang}
    try:
        r = httpx.post(
            f"{url.rstrip('/')}/v1/realtime/client_secrets",
            json={"session": session},
            headers={"X-CLIENT-TOKEN": token},
            timeout=30,
        )
    except httpx.HTTPError as exc:
        raise StreamError(f"Cannot reach {url}: {exc}") from None
    if r.status_code != 200:
        raise StreamError(f"The service refused a Live API secret (HTTP {r.status_code}): {r.text[:200]}")
    return str(r.json()["value"])


async def run_stream(
    url: str,
    token: str,
    frames: Iterable[bytes],
    lang: str | None = None,
    speed: float = 1.0,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    open_timeout: float = 60.0,
    live_api: bool = False,
) -> StreamOutcome:
    """Send ``frames`` (s16le 16 kHz mono) at ``speed`` times real time (0: as fast as the socket takes them), then
    the end of audio; collect the server's events until ``final``. Raises :class:`StreamError`.

    ``live_api``: through the Live API (``/v1/realtime``: a client secret minted with the token, base64 audio
    events, ``session.close``, until ``session.closed``) instead of ``/ws/stream-transcribe``."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    outcome = StreamOutcome()
    started = time.monotonic()

    def clock() -> float:
        return time.monotonic() - started

    def encode(frame: bytes) -> str | bytes:
        if not live_api:
            return frame
        return json.dumps({"type": "session.input_audio_buffer.append", "audio": base64.b64encode(frame).decode()})

    async def send_audio(ws: Any) -> None:
        source = iter(frames)
        while (frame := await asyncio.to_thread(next, source, None)) is not None:
            await ws.send(encode(frame))
            outcome.audio_seconds += len(frame) / BYTES_PER_SECOND
            if speed > 0:  # pace by the audio's own clock, so slow sends do not add up
                await asyncio.sleep(max(0.0, outcome.audio_seconds / speed - clock()))
        outcome.audio_sent_at = clock()
        await ws.send(json.dumps({"type": "session.close"}) if live_api else "EOS")

    target, headers, protocols = await _socket_target(url, token, lang, live_api)
    try:
        async with connect(
            target,
            additional_headers=headers,
            subprotocols=protocols,  # type: ignore[arg-type]
            open_timeout=open_timeout,
            max_size=2**24,
        ) as ws:
            sender: asyncio.Task[None] | None = None
            try:
                async for raw in ws:
                    event = json.loads(raw)
                    outcome.events.append((clock(), event))
                    if on_event is not None:
                        on_event(event)
                    if event.get("type") in START_EVENTS and sender is None:
                        sender = asyncio.create_task(send_audio(ws))
                    elif _ended(event):
                        break
            finally:
                if sender is not None and not sender.done():
                    sender.cancel()
                    await asyncio.gather(sender, return_exceptions=True)
                elif sender is not None:
                    sender.result()  # a failed send is the error to report
    except InvalidStatus as exc:
        status = exc.response.status_code
        hint = " Pass --token or set KHULUMA_TOKEN." if status in (401, 403) else ""
        raise StreamError(f"The service refused the stream (HTTP {status}).{hint}") from None
    except ConnectionClosed as exc:
        raise StreamError(f"The service closed the stream ({exc.rcvd.code if exc.rcvd else 'no code'}).") from None
    except OSError as exc:
        raise StreamError(f"Cannot reach {url}: {exc}") from None
    if outcome.final is None:
        raise StreamError("The stream ended without a final result.")
    return outcome


async def _socket_target(
    url: str, token: str, lang: str | None, live_api: bool
) -> tuple[str, dict[str, str], list[str] | None]:
    """The socket's URL, headers and subprotocols: ``/ws/stream-transcribe`` with the token, or the Live API with a
    client secret minted with it."""
    if not live_api:
        return stream_url(url, lang), {"X-CLIENT-TOKEN": token}, None
    secret = await asyncio.to_thread(mint_live_secret, url, token, lang)
    base = url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return f"{base}/v1/realtime", {}, ["realtime", f"vulavula-insecure-api-key.{secret}"]


def _ended(event: dict[str, Any]) -> bool:
    """Whether the session ended with ``event``; :class:`StreamError` for an error (both protocols send one only for
    a session that ends)."""
    kind = event.get("type")
    if kind == "error":
        raise StreamError(str(event.get("detail") or (event.get("error") or {}).get("message")))
    return kind in DONE_EVENTS


class _Screen:
    """Partial text in place (grey), finished segments as lines."""

    def __init__(self, live: Live, out: Console) -> None:
        self.live, self.out, self.printed = live, out, 0

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "segment":
            self._line(event.get("text", ""))
            self.printed += 1
        elif kind == "partial":
            self.live.update(Text(event.get("pending_text", ""), style="grey50"))
        elif kind in WITHHELD_EVENTS:
            language = event.get("language_code") or event.get("language")
            likely = f", most likely {language}" if language else ""
            start, end = event.get("start_time", 0.0), event.get("end_time", 0.0)
            self.out.print(f"[dim][{start:.1f}-{end:.1f} s not transcribed: no speech model for it{likely}][/dim]")
        elif kind == "final":
            for segment in event.get("segments", [])[self.printed :]:
                self._line(segment.get("text", ""))
            self.live.update(Text(""))
            seconds, language = event.get("audio_length_seconds", 0), event.get("language_code") or "?"
            console.print(f"[dim]{seconds:.1f} s of audio, language {language}[/dim]")

    def _line(self, text: str) -> None:
        if text.strip():
            self.out.print(text.strip(), highlight=False)


def stream(
    source: str = typer.Argument(..., help="An audio file, or - for raw PCM (s16le, 16 kHz, mono) on stdin."),
    url: str = typer.Option("http://127.0.0.1:8000", envvar="KHULUMA_URL", help="The service's base URL."),
    token: str = typer.Option(..., envvar="KHULUMA_TOKEN", help="Your token (X-CLIENT-TOKEN)."),
    lang: str | None = typer.Option(None, "--lang", help="Language code (default: detected)."),
    speed: float = typer.Option(1.0, help="1 = real time, 2 = twice as fast, 0 = as fast as possible."),
    json_lines: bool = typer.Option(False, "--json", help="Print every protocol event as a JSON line."),
) -> None:
    """Stream audio to the service and print the transcript live."""
    if source == "-":
        frames: Iterable[bytes] = stdin_frames()
    else:
        path = Path(source)
        if not path.is_file():
            console.print(f"[red]No such file: {source}[/red]")
            raise typer.Exit(2)
        frames = file_frames(path)
    out = Console()
    try:
        if json_lines:
            asyncio.run(
                run_stream(
                    url, token, frames, lang, speed, lambda e: print(json.dumps(e, ensure_ascii=False), flush=True)
                )
            )
        else:
            with Live(Text(""), console=out, transient=True, auto_refresh=False) as live:
                screen = _Screen(live, out)

                def show(event: dict[str, Any]) -> None:
                    screen(event)
                    live.refresh()

                asyncio.run(run_stream(url, token, frames, lang, speed, show))
    except StreamError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None

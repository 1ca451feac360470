"""The vendor's Live API example clients, replayed against both live endpoints: what their users see.

The clients are written from how the vendor's public examples behave (its Python client and its browser page):
mint a client secret with ``x-api-key`` (a source language only when one is set; a translation target by
default), append 100 ms PCM16 chunks at real time, print transcript deltas, and stop at the first ``error``
event (so an error is the end of a session, never a notice). The user-visible outcome is asserted: a clear
refusal, or a transcript in the right language, or speech flagged as not transcribed; never silence and never
invented text. espeak's Setswana stands in for a language without a speech model (tests may not ship real
recordings; docs/speech.md#live-sessions-without-a-language has the figures on real isiZulu calls).
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.websockets import WebSocketDisconnect

from contracts.handles import call
from scripts.eval_wer import word_errors
from serve_app.admission.live import CURRENT_SEAT, REALTIME_HEADROOM
from tests.speechdata import silence, speech_16k

ENGLISH = "Good morning, thank you for calling the bank. How can I help you with your account today?"
MORE_ENGLISH = "The train to Pretoria leaves from platform number four."
SETSWANA = "Batho botlhe ba tsetswe ba gololesegile le go lekalekana ka seriti le ditshwanelo."
CHUNK_MS = 100


@dataclass
class Outcome:
    """What the vendor's Python client shows: its deltas, the error it stopped on, and every event."""

    minted: int = 0
    refusal: str = ""  # the body of a refused mint, or the error event's message
    transcript: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


def vendor_client(  # type: ignore[no-untyped-def]
    client, token: str, pcm: bytes, rate: int = 16_000, source: str = "", target: str = "eng", paced: bool = True
) -> Outcome:
    """The vendor's Python example: its settings are ``SOURCE_LANGUAGE`` (blank by default) and
    ``TARGET_LANGUAGE`` ("eng" by default); it paces the audio at real time and ends on the first error.
    ``paced=False``: as the vendor's post-install qualification sends it, as fast as the socket allows."""
    session: dict[str, Any] = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}}}}
    if source:
        session["audio"]["input"]["transcription"] = {"language": source}
    if target:
        session["audio"]["output"] = {"language": target}
    minted = client.post("/v1/realtime/client_secrets", json={"session": session}, headers={"x-api-key": token})
    out = Outcome(minted=minted.status_code)
    if minted.status_code != 200:
        out.refusal = minted.json()["detail"]
        return out
    secret = minted.json()["value"]
    step = rate * 2 * CHUNK_MS // 1000
    with client.websocket_connect(
        "/v1/realtime", subprotocols=["realtime", f"vulavula-insecure-api-key.{secret}"]
    ) as ws:
        started = time.monotonic()
        for n, i in enumerate(range(0, len(pcm), step)):
            ws.send_text(json.dumps({"type": "session.input_audio_buffer.append", "audio": _b64(pcm[i : i + step])}))
            if paced:
                time.sleep(max(0.0, started + (n + 1) * CHUNK_MS / 1000 - time.monotonic()))
        ws.send_text(json.dumps({"type": "session.close"}))
        while True:
            try:
                event = ws.receive_json()
            except WebSocketDisconnect:
                break
            out.events.append(event)
            if event["type"] == "session.input_transcript.delta":
                out.transcript += event["delta"]
            elif event["type"] == "error":
                out.refusal = event["error"]["message"]
                break
            elif event["type"] == "session.closed":
                break
    return out


def stream_client(  # type: ignore[no-untyped-def]
    client, token: str, pcm: bytes, lang_code: str | None = None, paced: bool = True
) -> tuple[list[dict[str, Any]], int]:
    """``/ws/stream-transcribe`` the same way: binary frames at real time (or as fast as the socket allows),
    "EOS", every message to the close."""
    query = f"?lang_code={lang_code}" if lang_code else ""
    events: list[dict[str, Any]] = []
    with client.websocket_connect(f"/ws/stream-transcribe{query}", headers={"X-CLIENT-TOKEN": token}) as ws:
        assert ws.receive_json()["type"] == "ready"
        started, step = time.monotonic(), 16_000 * 2 * CHUNK_MS // 1000
        for n, i in enumerate(range(0, len(pcm), step)):
            ws.send_bytes(pcm[i : i + step])
            if paced:
                time.sleep(max(0.0, started + (n + 1) * CHUNK_MS / 1000 - time.monotonic()))
        ws.send_text("EOS")
        while True:
            try:
                events.append(ws.receive_json())
            except WebSocketDisconnect as closed:
                return events, closed.code
            if events[-1]["type"] == "final":
                message = ws.receive()
                return events, message["code"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


@pytest.fixture(scope="module")
def voices(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder: Path = tmp_path_factory.mktemp("vendor-clients")
    english = speech_16k(ENGLISH, folder, "en")
    setswana = speech_16k(SETSWANA + " " + SETSWANA, folder, "tn", voice="tn")
    more = speech_16k(MORE_ENGLISH, folder, "en2")
    return {
        "english": np.concatenate([english, silence(0.8), more]),
        "setswana": setswana,
        # a call that moves from English into a language without a model and back
        "switch": np.concatenate([english, silence(0.9), setswana, silence(0.9), more]),
        "switch_english_seconds": english.size / 16_000,  # where its first English ends
    }


@pytest.fixture()
def client(local_app):
    return local_app(capabilities=["speech"])


def test_the_python_example_with_its_defaults_ends_on_a_clear_refusal(client, make_token, voices):
    """Its default TARGET_LANGUAGE=eng asks for a translation no model here can make: refused at minting, with a
    400 that names the field and the missing model, before any audio is sent."""
    out = vendor_client(client, make_token("vendor", "defaults"), pcm16(voices["english"]))
    assert out.minted == 400 and not out.events
    assert "session.audio.output.language" in out.refusal and "KHULUMA_TRANSLATION_MODEL" in out.refusal


def test_english_without_a_language_streams_its_transcript(client, make_token, voices):
    out = vendor_client(client, make_token("vendor", "english"), pcm16(voices["english"]), target="")
    assert out.minted == 200 and not out.refusal, out.refusal
    errors, words = word_errors(ENGLISH + " " + MORE_ENGLISH, out.transcript)
    assert errors / words <= 0.35, out.transcript
    completed = out.of("session.input_transcript.completed")
    assert completed and all(c["language"] == "eng" and "warnings" not in c for c in completed)
    assert not out.of("session.input_transcript.withheld")
    assert out.events[-1]["type"] == "session.closed" and out.events[-1]["language"] == "eng"


def test_a_language_without_a_model_is_refused_and_nothing_is_invented(client, make_token, voices):
    out = vendor_client(client, make_token("vendor", "setswana"), pcm16(voices["setswana"]), target="")
    assert out.events[-1]["type"] == "error" and out.events[-1]["error"]["code"] == "language_not_served"
    assert "KHULUMA_SPEECH_LANGUAGE_MODELS" in out.refusal
    assert not out.transcript and not out.of("session.input_transcript.completed")


def test_a_call_that_switches_language_keeps_its_english_and_flags_the_rest(client, make_token, voices):
    """English first (the session settles on it after about 6 s of speech), then Setswana, then English again:
    the Setswana is withheld with a notice naming the setting, never written as English, and the session goes
    on to transcribe the English after it."""
    out = vendor_client(client, make_token("vendor", "switch"), pcm16(voices["switch"]), target="")
    assert not out.refusal and out.events[-1]["type"] == "session.closed", out.events[-1]
    withheld = out.of("session.input_transcript.withheld")
    assert withheld and all("KHULUMA_SPEECH_LANGUAGE_MODELS" in w["message"] for w in withheld)
    assert sum(w["end_time"] - w["start_time"] for w in withheld) >= 4.0  # most of the Setswana
    assert all(w["start_time"] >= voices["switch_english_seconds"] - 0.5 for w in withheld)  # none of the English
    errors, words = word_errors(ENGLISH + " " + MORE_ENGLISH, out.transcript)
    assert errors / words <= 0.4, out.transcript  # the Setswana added no invented words to the English
    assert any("not transcribed" in w for w in out.events[-1]["warnings"])
    assert [c["language"] for c in out.of("session.input_transcript.completed")] == ["eng"] * len(
        out.of("session.input_transcript.completed")
    )


def test_under_the_warn_policy_switched_speech_is_sent_with_a_warning_on_its_segment(local_app, make_token, voices):
    """Nothing is withheld; whatever is sent of the Setswana carries the warning on its own completed event (the
    hallucination guards may still leave a looping decode out, and say so)."""
    client = local_app(capabilities=["speech"], speech={"unserved_language": "warn"})
    out = vendor_client(client, make_token("vendor", "warn"), pcm16(voices["switch"]), target="")
    assert not out.refusal and not out.of("session.input_transcript.withheld")
    start, end = (
        voices["switch_english_seconds"] + 0.9,
        voices["switch_english_seconds"] + 0.9 + voices["setswana"].size / 16_000,
    )
    switched = [
        c for c in out.of("session.input_transcript.completed") if c["start_time"] < end and c["end_time"] > start
    ]
    assert all("KHULUMA_SPEECH_UNSERVED_LANGUAGE=warn" in c["warnings"][0] for c in switched), switched
    closed = out.events[-1]
    assert switched or any("left out" in w for w in closed["warnings"]), closed


def test_the_stream_route_flags_switched_speech_and_refuses_a_language_without_a_model(client, make_token, voices):
    token = make_token("vendor", "ws")
    events, code = stream_client(client, token, pcm16(voices["switch"]))
    assert code == 1000 and events[-1]["type"] == "final" and events[-1]["language_code"] == "eng"
    withheld = [e for e in events if e["type"] == "withheld"]
    assert withheld and all("KHULUMA_SPEECH_LANGUAGE_MODELS" in w["detail"] for w in withheld)
    segments = [e for e in events if e["type"] == "segment"]
    assert segments and all(s["language_code"] == "eng" for s in segments)
    errors, words = word_errors(ENGLISH + " " + MORE_ENGLISH, events[-1]["text"])
    assert errors / words <= 0.4, events[-1]["text"]

    events, code = stream_client(client, token, pcm16(voices["setswana"]))
    assert code == 1008 and events[-1]["type"] == "error" and "KHULUMA_SPEECH_LANGUAGE_MODELS" in events[-1]["detail"]
    assert not any(e.get("text") for e in events if e["type"] in ("partial", "segment"))


# ------------------------------------------------------------------------------------------------ the lock-out


class SlowSteps:
    """The Speech handle with its live steps slower than real time: each takes ``factor`` times the new audio it
    covers on top of its decode, as steps that judged a language without a model did on 2 cores."""

    def __init__(self, handle: Any, factor: float) -> None:
        self._handle, self.factor = handle, factor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    @property
    def live_step(self) -> Any:
        handle, factor = self._handle, self.factor

        class Method:
            @staticmethod
            def remote(request: Any) -> Any:
                async def step() -> Any:
                    seat = CURRENT_SEAT.get()
                    heard = seat.heard_until if seat is not None else 0.0
                    end = request.offset + len(request.pcm) / (2 * request.sample_rate)
                    result = await call(handle.live_step.remote(request))
                    await asyncio.sleep(factor * max(0.0, end - heard))
                    return result

                return step()

        return Method


@pytest.mark.parametrize("endpoint", ["realtime", "stream"])
def test_sessions_ended_for_their_language_lock_nobody_out(local_app, make_token, voices, endpoint: str) -> None:
    """The reported lock-out, replayed: sessions in a language without a model, two at a time (the second arrives
    while the first is open), each slower than real time and each ended for its language; then, with none open,
    a session with its language given is admitted at once."""
    client = local_app(capabilities=["speech"])
    speech = client.context.clients.speech
    speech._handle = SlowSteps(speech._handle, 1.3)
    setswana = pcm16(voices["setswana"])
    outcomes: list[Any] = [None, None]

    def unserved(index: int) -> None:
        token = make_token("lockout", f"{endpoint}-{index}")
        if endpoint == "realtime":
            outcomes[index] = vendor_client(client, token, setswana, target="", paced=False)
        else:
            outcomes[index] = stream_client(client, token, setswana, paced=False)

    first = threading.Thread(target=unserved, args=(0,))
    first.start()
    deadline = time.monotonic() + 30
    while not any(seat.realtime_factor() for seat in client.context.admission.live.open.values()):
        assert time.monotonic() < deadline and first.is_alive(), "the first session was never measured"
        time.sleep(0.05)
    unserved(1)  # arrives while the first is open, measured slower than real time
    first.join(60)
    for outcome in outcomes:
        if endpoint == "realtime":
            assert outcome.minted == 200 and outcome.events[-1]["error"]["code"] == "language_not_served", outcome
            assert not outcome.transcript
        else:
            events, code = outcome
            assert code == 1008 and "KHULUMA_SPEECH_LANGUAGE_MODELS" in events[-1]["detail"], events[-1]
    live = client.context.admission.live
    assert not live.open and live.session_load is not None and live.session_load > REALTIME_HEADROOM
    started = time.monotonic()
    token = make_token("lockout", f"{endpoint}-english")
    if endpoint == "realtime":
        opened = vendor_client(client, token, b"", source="eng", target="")
        assert opened.minted == 200 and opened.events[0]["type"] == "session.created", opened
        assert opened.events[-1]["type"] == "session.closed"
    else:
        events, code = stream_client(client, token, b"", lang_code="eng")
        assert code == 1000 and events[-1]["type"] == "final"
    assert time.monotonic() - started < 5.0

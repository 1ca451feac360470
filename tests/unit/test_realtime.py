"""The Live API (``/v1/realtime``) over the in-process Speech deployment (no Ray cluster).

The client here is written from the protocol as Vulavula's own examples speak it: mint a client secret with the
token, open the WebSocket with the subprotocols ``realtime`` and ``vulavula-insecure-api-key.<secret>``, read
``session.created``, send base64 PCM in ``session.input_audio_buffer.append`` events, ``session.close``, and read
deltas until ``session.closed``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.signal import resample_poly
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from persistence.models import RealtimeClientSecret, UsageRecord
from scripts.eval_wer import word_errors
from serve_app.services.live.client_secrets import OpenedSecret, consume_secret, mint_secret
from serve_app.services.live.deltas import AppendOnlyTranscript
from serve_app.tokens import TokenVerifier
from tests.speechdata import espeak, read_pcm, silence, speech_16k

TEXT = "Good morning, how can I help you today?"
SECOND = "The train to Pretoria leaves from platform number four."
SETSWANA = "Batho botlhe ba tsetswe ba gololesegile le go lekalekana ka seriti le ditshwanelo."
URL = "/v1/realtime"
SECRETS = "/v1/realtime/client_secrets"


# ------------------------------------------------------------------------------------------ a Live API client


def mint(client, token: str, session: dict[str, Any] | None = None) -> dict[str, Any]:
    body = None if session is None else {"session": session}
    r = client.post(SECRETS, json=body, headers={"X-CLIENT-TOKEN": token})
    assert r.status_code == 200, r.text
    return r.json()


def subprotocols(secret: str) -> list[str]:
    return ["realtime", f"vulavula-insecure-api-key.{secret}"]


def append(pcm: bytes) -> str:
    return json.dumps({"type": "session.input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})


CLOSE = json.dumps({"type": "session.close"})


def until_closed(ws) -> tuple[list[dict[str, Any]], int]:  # type: ignore[no-untyped-def]
    """Every event up to ``session.closed`` (or the server's close), and the close code."""
    events = []
    while True:
        try:
            events.append(ws.receive_json())
        except WebSocketDisconnect as closed:
            return events, closed.code
        if events[-1]["type"] == "session.closed":
            message = ws.receive()
            assert message["type"] == "websocket.close"
            return events, message["code"]


def stream(client, secret: str, pcm: bytes, rate: int, chunk_ms: int = 100) -> tuple[list[dict[str, Any]], int]:  # type: ignore[no-untyped-def]
    with client.websocket_connect(URL, subprotocols=subprotocols(secret)) as ws:
        assert ws.accepted_subprotocol == "realtime"
        step = rate * 2 * chunk_ms // 1000
        for i in range(0, len(pcm), step):
            ws.send_text(append(pcm[i : i + step]))
        ws.send_text(CLOSE)
        return until_closed(ws)


def pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


def deltas(events: list[dict[str, Any]], kind: str = "session.input_transcript.delta") -> list[str]:
    return [e["delta"] for e in events if e["type"] == kind]


def usage(client, route: str = "realtime") -> list[UsageRecord]:  # type: ignore[no-untyped-def]
    client.context.usage.flush_now()
    with client.context.db.session() as s:
        return s.query(UsageRecord).filter(UsageRecord.route == route).order_by(UsageRecord.id).all()


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def speech_audio(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    folder = tmp_path_factory.mktemp("live-audio")
    return np.concatenate([speech_16k(TEXT, folder, "one"), silence(0.6), speech_16k(SECOND, folder, "two")])


@pytest.fixture()
def client(local_app):
    return local_app(capabilities=["speech"])


@pytest.fixture()
def token(make_token) -> str:
    return make_token("live-co", "calls")


# ------------------------------------------------------------------------------------------ the transcript


def _check_transcript(events: list[dict[str, Any]]) -> str:
    """Deltas only append, carry their own spaces, and at every completed event the deltas so far begin with the
    completed texts so far; at the end the two are the same text."""
    so_far, completed = "", []
    for event in events:
        if event["type"] == "session.input_transcript.delta":
            delta = event["delta"]
            assert delta.strip() and delta == delta.rstrip()
            assert delta.startswith(" ") == bool(so_far), (so_far, delta)
            so_far += delta
        elif event["type"] == "session.input_transcript.completed":
            completed.append(event["text"])
            assert so_far.startswith(" ".join(completed)), (so_far, completed)
    assert so_far == " ".join(completed)
    return so_far


@pytest.mark.parametrize("rate,language", [(16_000, "eng"), (24_000, None)])
def test_a_session_streams_append_only_deltas(client, make_token, speech_audio, rate: int, language: str | None):
    """16 kHz with the language given, and 24 kHz (resampled by the server) with the language detected."""
    owner = make_token(f"live-{rate}", "calls")
    session = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}}}}
    if language:
        session["audio"]["input"]["transcription"] = {"language": language}
    secret = mint(client, owner, session)
    assert secret["value"].startswith("ek_") and secret["expires_at"] > time.time()
    audio = speech_audio if rate == 16_000 else resample_poly(speech_audio, 3, 2)
    events, code = stream(client, secret["value"], pcm16(audio), rate)

    assert code == 1000, events[-1]
    created = events[0]
    assert created["type"] == "session.created" and created["session"]["id"].startswith("sess_")
    assert created["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": rate}
    assert not [e for e in events if e["type"] == "error"]
    text = _check_transcript(events)
    errors, words = word_errors(TEXT + " " + SECOND, text)
    assert errors / words <= 0.35, text
    completed = [e for e in events if e["type"] == "session.input_transcript.completed"]
    assert [c["start_time"] for c in completed] == sorted(c["start_time"] for c in completed)
    assert all(c["language"] == "eng" and c["end_time"] >= c["start_time"] for c in completed)
    closed = events[-1]
    assert closed["type"] == "session.closed" and closed["session"]["id"] == created["session"]["id"]
    seconds = len(audio) / rate
    assert closed["audio_seconds"] == pytest.approx(seconds, abs=0.01) and closed["language"] == "eng"
    # metered to the customer who minted the secret, as the realtime route
    row = usage(client)[-1]
    principal = TokenVerifier(client.context.db).verify(owner)
    assert principal is not None and (row.customer_id, row.project_id) == (principal.customer_id, principal.project_id)
    assert row.status == "successful" and row.seconds_transcribed == pytest.approx(seconds, abs=0.01)


def test_deltas_stay_append_only_across_commits_at_pauses(client, token, tmp_path: Path):
    """Three utterances with pauses: each pause commits a segment mid-stream (a completed event before the next
    utterance's deltas), deltas only ever append across those commits, and the completed texts are the
    transcript."""
    parts = [speech_16k(TEXT, tmp_path, "a"), silence(0.8), speech_16k(SECOND, tmp_path, "b"), silence(0.8)]
    audio = np.concatenate([*parts, speech_16k(TEXT, tmp_path, "c")])
    events, code = stream(
        client,
        mint(client, token, {"audio": {"input": {"transcription": {"language": "eng"}}}})["value"],
        pcm16(audio),
        16_000,
    )
    assert code == 1000 and not [e for e in events if e["type"] == "error"], events[-1]
    text = _check_transcript(events)
    completed = [e for e in events if e["type"] == "session.input_transcript.completed"]
    assert len(completed) >= 3, completed
    assert completed[0]["end_time"] <= len(parts[0]) / 16_000 + 0.8  # the first ended at the first pause
    errors, words = word_errors(f"{TEXT} {SECOND} {TEXT}", text)
    assert errors / words <= 0.35, text


def test_partial_hypotheses_become_append_only_deltas():
    from contracts.speech import Segment, Word

    def seg(text: str, start: float = 0.0, end: float = 1.0) -> Segment:
        words = [Word(word=w, start_time=start, end_time=end) for w in text.split()]
        return Segment(start_time=start, end_time=end, text=text, words=words)

    t = AppendOnlyTranscript()
    assert t.agree([seg("Good morning, how can I help you?")]) == ""  # one hypothesis: nothing is stable yet
    assert t.agree([seg("Good morning, how can I help you today?")]) == "Good morning, how can I help"
    # a sent word changed case: compared without it, the rest agrees; nothing sent is taken back
    assert t.agree([seg("Good Morning, how can I help you today?")]) == " you today?"
    assert t.agree([seg("Good Morning, how can I help you today? The")]) == ""
    done = t.commit([seg("Good morning, how can I help you today.")])  # the final decode differs in punctuation
    assert [(d.delta, d.text) for d in done] == [("", "Good morning, how can I help you today?")]
    assert t.agree([seg("The train", 3, 4)]) == " The"  # the committed words left both hypotheses
    done = t.commit([seg("The train leaves.", 3, 5)], final=True)
    assert [(d.delta, d.text) for d in done] == [(" train leaves.", "The train leaves.")]
    t2 = AppendOnlyTranscript()
    t2.agree([seg("one two three")])
    assert t2.agree([seg("one two three four")]) == "one two three"
    t3 = AppendOnlyTranscript()  # punctuation that comes with the next word does not hold the words before it
    t3.agree([seg("However due to the slow")])
    assert t3.agree([seg("However, due to the slow communication")]) == "However, due to the slow"
    t4 = AppendOnlyTranscript()  # a hidden hypothesis (before the language is settled) is only agreed with
    assert t4.agree([seg("To the north and")], shown=False) == ""
    assert t4.agree([seg("To the north and within")]) == "To the north and"
    done = t2.commit([], final=True)  # the words sent belong to a completed segment even when none came
    assert [(d.delta, d.text) for d in done] == [("", "one two three")]


# ------------------------------------------------------------------------------------------ minting


def test_mint_defaults_validation_and_auth(local_app, token, db):
    client = local_app(capabilities=["speech"], speech={"realtime_secret_seconds": 45})
    headers = {"X-CLIENT-TOKEN": token}
    for body in (None, {}, {"session": {}}):
        r = client.post(SECRETS, json=body, headers=headers)
        assert r.status_code == 200, r.text
        minted = r.json()
        assert minted["expires_at"] == pytest.approx(time.time() + 45, abs=3)
        assert minted["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16000}
        assert minted["session"]["audio"]["output"]["language"] is None
    r = client.post(
        SECRETS, json={"session": {"audio": {"input": {"transcription": {"language": "English"}}}}}, headers=headers
    )
    assert r.json()["session"]["audio"]["input"]["transcription"]["language"] == "eng"

    def refused(session: Any) -> str:
        r = client.post(SECRETS, json={"session": session}, headers=headers)
        assert r.status_code == 400, r.text
        return r.json()["detail"]

    assert "session.audio.input.format.rate" in refused({"audio": {"input": {"format": {"rate": "fast"}}}})
    assert "session.audio.input.format.rate" in refused({"audio": {"input": {"format": {"rate": 2_000_000}}}})
    assert "session.audio.input.format.type" in refused({"audio": {"input": {"format": {"type": "audio/mp3"}}}})
    detail = refused({"audio": {"input": {"transcription": {"language": "zul"}}}})
    assert "session.audio.input.transcription.language" in detail and "KHULUMA_SPEECH_LANGUAGE_MODELS" in detail
    assert "session.audio.output.language" in refused({"audio": {"output": {"language": "klingon"}}})
    assert "session" in refused("not an object")
    r = client.post(SECRETS, content=b"{not json", headers={**headers, "Content-Type": "application/json"})
    assert r.status_code == 400
    assert client.post(SECRETS, json={}).status_code == 401
    assert client.post(SECRETS, json={}, headers={"X-CLIENT-TOKEN": "khk_wrong"}).status_code == 401
    # Vulavula's own clients mint with x-api-key; HTTP Basic (the token as password) works too
    assert client.post(SECRETS, json={}, headers={"x-api-key": token}).status_code == 200
    assert client.post(SECRETS, json={}, auth=("anyone", token)).status_code == 200
    assert client.post(SECRETS, json={}, headers={"x-api-key": "khk_wrong"}).status_code == 401


def test_secrets_are_random_hashed_and_bound_to_their_minter(client, make_token, db):
    token_a, token_b = make_token("cust-a", "web"), make_token("cust-b", "web")
    a, b = mint(client, token_a)["value"], mint(client, token_b)["value"]
    assert a != b and len(a) > 40
    with db.session() as s:
        rows = {r.secret_hash: r for r in s.query(RealtimeClientSecret).all()}
    stored = json.dumps([[r.secret_hash, r.session] for r in rows.values()])
    assert a not in stored and b not in stored  # only the hash is kept
    row_a, row_b = rows[hashlib.sha256(a.encode()).hexdigest()], rows[hashlib.sha256(b.encode()).hexdigest()]
    verifier = TokenVerifier(db)
    pa, pb = verifier.verify(token_a), verifier.verify(token_b)
    assert pa is not None and pb is not None
    assert (row_a.customer_id, row_a.token_id) == (pa.customer_id, pa.token_id) != (row_b.customer_id, row_b.token_id)

    # B's secret presented with A's token is refused (and used up); A's secret opens A's session, metered to A
    b_with_a = {"subprotocols": subprotocols(b), "headers": {"X-CLIENT-TOKEN": token_a}}
    with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(URL, **b_with_a):
        pass
    assert denied.value.status_code == 403 and "another customer" in denied.value.json()["detail"]
    with client.websocket_connect(URL, subprotocols=subprotocols(a), headers={"X-CLIENT-TOKEN": token_a}) as ws:
        assert ws.receive_json()["type"] == "session.created"
        ws.send_text(append(pcm16(silence(0.2))))
        ws.send_text(CLOSE)
        events, code = until_closed(ws)
    assert code == 1000 and events[-1]["type"] == "session.closed"
    row = usage(client)[-1]
    assert (row.customer_id, row.project_id, row.status) == (pa.customer_id, pa.project_id, "successful")
    assert row.seconds_transcribed == pytest.approx(0.2)


def _refused(client, protocols: list[str]) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(URL, subprotocols=protocols):
        pass
    return denied.value.status_code, denied.value.json()["detail"]


def test_only_a_fresh_unused_secret_opens_a_session(local_app, token):
    client = local_app(capabilities=["speech"], speech={"realtime_secret_seconds": 0.3})
    assert _refused(client, ["realtime"])[0] == 401  # no secret at all
    status, detail = _refused(client, subprotocols("ek_made-up-secret"))
    assert status == 403 and "client_secrets" in detail
    expired = mint(client, token)["value"]
    used = mint(client, token)["value"]
    with client.websocket_connect(URL, subprotocols=subprotocols(used)) as ws:
        assert ws.receive_json()["type"] == "session.created"
        ws.send_text(CLOSE)
        assert until_closed(ws)[1] == 1000
    assert _refused(client, subprotocols(used))[0] == 403  # single use
    time.sleep(0.4)
    assert _refused(client, subprotocols(expired))[0] == 403  # past its lifetime


def test_two_connections_racing_for_one_secret_get_one_session(db, make_token):
    principal = TokenVerifier(db).verify(make_token("racer", "p"))
    assert principal is not None
    for _ in range(5):
        secret, _expires = mint_secret(db, principal, {"audio": {}}, 60)
        barrier = threading.Barrier(4)
        results: list[OpenedSecret | None] = []

        def consume(secret: str = secret, barrier: threading.Barrier = barrier, results: list = results) -> None:
            barrier.wait()
            results.append(consume_secret(db, secret))

        threads = [threading.Thread(target=consume) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        opened = [r for r in results if r is not None]
        assert len(opened) == 1 and opened[0].principal.customer_id == principal.customer_id


# ------------------------------------------------------------------------------------------ events and errors


MALFORMED = [
    ("not json", "invalid_event"),
    (json.dumps([1, 2]), "invalid_event"),
    (json.dumps({"type": 5}), "invalid_event"),
    (json.dumps({"type": "response.create"}), "unknown_event"),
    (json.dumps({"type": "session.input_audio_buffer.append"}), "invalid_audio"),
    (json.dumps({"type": "session.input_audio_buffer.append", "audio": "@@not base64@@"}), "invalid_audio"),
    (append(b"\x00\x00\x00"), "invalid_audio"),
    (b"\x00" * 320, "invalid_event"),  # a binary frame
]


@pytest.mark.parametrize("sent,code", MALFORMED, ids=[code for _, code in MALFORMED])
def test_a_malformed_or_unknown_event_ends_the_session_with_its_error(client, token, sent: str | bytes, code: str):
    """An error event is only ever the last word of a session (the vendor's clients end on the first one)."""
    secret = mint(client, token)["value"]
    with client.websocket_connect(URL, subprotocols=subprotocols(secret)) as ws:
        assert ws.receive_json()["type"] == "session.created"
        ws.send_text(append(pcm16(silence(0.2))))
        ws.send_bytes(sent) if isinstance(sent, bytes) else ws.send_text(sent)
        events, close = until_closed(ws)
    assert close == 1008 and [e["type"] for e in events] == ["error"], events
    assert events[0]["error"]["code"] == code and events[0]["error"]["message"]


def test_a_translation_no_model_can_make_is_refused_at_minting(client, token):
    """Refused before any session starts, with a 400 that names the field and the missing model; a transcript-only
    session still mints."""
    r = client.post(SECRETS, json={"session": {"audio": {"output": {"language": "eng"}}}}, headers={"x-api-key": token})
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert "session.audio.output.language" in detail and "KHULUMA_TRANSLATION_MODEL" in detail
    assert "without session.audio.output.language" in detail
    assert (
        mint(client, token, {"audio": {"output": {"language": ""}}})["session"]["audio"]["output"]["language"] is None
    )


def test_completed_segments_are_translated(local_app, token, tiny_nllb, tmp_path: Path):
    """A tiny random NLLB model stands in for a real one: what matters is the events, not the words."""
    client = local_app(["speech", "translation"], translation={"model": str(tiny_nllb.ct2), "max_length": 8})
    secret = mint(
        client, token, {"audio": {"input": {"transcription": {"language": "eng"}}, "output": {"language": "zul"}}}
    )
    audio = speech_16k(TEXT, tmp_path, "hello")
    events, code = stream(client, secret["value"], pcm16(audio), 16_000)
    assert code == 1000 and not [e for e in events if e["type"] == "error"], events
    completed = [e for e in events if e["type"] == "session.input_transcript.completed"]
    translated = deltas(events, "session.output_transcript.delta")
    assert completed and len(translated) == len([c for c in completed if c["text"]])
    assert all(d.startswith(" ") == (i > 0) for i, d in enumerate(translated))
    assert usage(client)[-1].tokens == sum(len(c["text"].split()) for c in completed)


def test_audio_in_a_language_without_a_model_is_refused(client, token, tmp_path: Path):
    samples, rate = read_pcm(espeak(SETSWANA + " " + SETSWANA, tmp_path / "tn.wav", voice="tn"))
    secret = mint(client, token, {"audio": {"input": {"format": {"rate": rate}}}})["value"]
    events, code = stream(client, secret, pcm16(samples), rate)
    assert code == 1008
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "language_not_served"
    assert "KHULUMA_SPEECH_LANGUAGE_MODELS" in events[-1]["error"]["message"]
    assert not deltas(events)  # nothing was ever shown as a served language's text
    assert usage(client)[-1].status == "failed"


def test_an_idle_session_closes_with_4408(local_app, token):
    client = local_app(capabilities=["speech"], speech={"stream_idle_seconds": 0.5})
    secret = mint(client, token)["value"]
    with client.websocket_connect(URL, subprotocols=subprotocols(secret)) as ws:
        assert ws.receive_json()["type"] == "session.created"
        events, code = until_closed(ws)
    assert code == 4408 and events[-1]["error"]["code"] == "idle_timeout"
    assert "KHULUMA_SPEECH_STREAM_IDLE_SECONDS" in events[-1]["error"]["message"]


def test_more_audio_than_the_limit_closes_with_1009(local_app, token):
    client = local_app(capabilities=["speech"], max_request_mb=0.01)
    secret = mint(client, token)["value"]
    with client.websocket_connect(URL, subprotocols=subprotocols(secret)) as ws:
        assert ws.receive_json()["type"] == "session.created"
        ws.send_text(append(b"\x00" * 20_000))
        events, code = until_closed(ws)
    assert code == 1009 and events[-1]["error"]["code"] == "too_large"

"""CTC speech models routed per language, through the HTTP service (the Speech deployment under Serve's local
testing mode): every path answers isiZulu from the model routed to it, auto-detection reaches it by the documented
signal, and ``/api/v1/models`` tells the route and its quality source.

The models are tiny and built here (``tests/speech_models.py``): an MMS-style model with isiZulu and isiXhosa
adapters, and a "parrot" in sherpa-onnx's Omnilingual layout whose frames always spell one isiZulu sentence (so
that the text language identifier reads its transcript as isiZulu). The weights are not a real model's: the
tests assert routing and structure, not words.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.speech_models import PARROT_ZULU, TinyCTCModels, build_parrot_onnx, session_ctc_models
from tests.speechdata import silence, speech_16k, write_audio

SETSWANA = "Batho botlhe ba tsetswe ba gololesegile le go lekalekana ka seriti le ditshwanelo."
ENGLISH = "Please call me back when you have finished reading the report about the new account."


@pytest.fixture(scope="session")
def ctc_models(tmp_path_factory: pytest.TempPathFactory) -> TinyCTCModels:
    return session_ctc_models(tmp_path_factory)


@pytest.fixture(scope="session")
def parrot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_parrot_onnx(tmp_path_factory.mktemp("ctc") / "zul-parrot")


@pytest.fixture()
def client(local_app, parrot: Path, ctc_models: TinyCTCModels):
    routes = {"zul": str(parrot), "xho": str(ctc_models.mms)}
    return local_app(capabilities=["speech"], speech={"language_models": routes})


@pytest.fixture()
def headers(make_token) -> dict[str, str]:
    return {"X-CLIENT-TOKEN": make_token("ctc-co", "calls")}


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("ctc-audio")
    english = speech_16k(ENGLISH, folder, "en")
    said = english  # what the CTC models are asked to transcribe (the VAD must hear speech; they ignore its words)
    setswana = speech_16k(SETSWANA + " " + SETSWANA, folder, "tn", voice="tn")
    return {
        "said": write_audio(said, 16_000, folder / "said.wav", "wav"),
        "said_pcm": said,
        "english": write_audio(english, 16_000, folder / "en.wav", "wav"),
        "setswana": write_audio(setswana, 16_000, folder / "tn.wav", "wav"),
    }


def said_seconds(audio: dict[str, Any]) -> float:
    return float(audio["said_pcm"].size / 16_000)


def _post(client, path: str, headers: dict[str, str], file: Path, field: str = "file", **params: Any):  # type: ignore[no-untyped-def]
    with file.open("rb") as f:
        return client.post(path, headers=headers, params=params, files={field: (file.name, f, "audio/wav")})


def test_sync_fast_and_openai_answer_isizulu_from_the_model_routed_to_it(client, headers, audio) -> None:
    record = _post(client, "/api/v2alpha/transcribe/sync/file", headers, audio["said"], lang_code="zul").json()
    assert record["language_code"] == "zul" and record["model"] == "zul-parrot", record
    assert record["transcription_text"].startswith("ngiyabonga kakhulu")
    assert record["language_detected_by"] is None  # the caller said it
    timeline = [item for item in record["diarisation_result"]["timeline"] if item["type"] == "speech"]
    words = [w for item in timeline for w in item["words"]]
    assert words and all(0 <= w["start_time"] < w["end_time"] <= said_seconds(audio) for w in words)
    assert [w["start_time"] for w in words] == sorted(w["start_time"] for w in words)

    fast = _post(client, "/api/v2alpha/transcribe/fast", headers, audio["said"], "upload", lang_code="cs-zul").json()
    assert fast["lang_code"] == "cs-zul" and fast["text"].startswith("ngiyabonga")  # code-switched on isiZulu's

    xhosa = _post(client, "/api/v2alpha/transcribe/sync/file", headers, audio["said"], lang_code="xho").json()
    assert xhosa["language_code"] == "xho" and xhosa["model"] == "mms"  # the adapter model, routed for xho

    with audio["said"].open("rb") as f:
        openai = client.post(
            "/v1/audio/transcriptions",
            headers={"Authorization": f"Bearer {headers['X-CLIENT-TOKEN']}"},
            files={"file": ("said.wav", f, "audio/wav")},
            data={"model": "whisper-1", "language": "zu", "response_format": "verbose_json"},
        )
    assert openai.status_code == 200, openai.text
    assert openai.json()["text"].startswith("ngiyabonga") and openai.json()["language"] in ("zul", "zulu")


def test_auto_detection_reaches_the_ctc_model_only_through_its_transcript(client, headers, audio) -> None:
    """Speech Whisper cannot place in a served language goes to the CTC models: the parrot's transcript reads as
    isiZulu, so the record is isiZulu and says which signal decided. English, which Whisper places, never reaches
    the parrot (it would call it isiZulu too)."""
    found = _post(client, "/api/v2alpha/transcribe/sync/file", headers, audio["setswana"]).json()
    assert found["language_code"] == "zul" and found["language_detected_by"] == "ctc transcript + text language id"
    english = _post(client, "/api/v2alpha/transcribe/sync/file", headers, audio["english"]).json()
    assert english["language_code"] == "eng" and english["language_detected_by"] == "whisper"
    assert "report" in english["transcription_text"].lower()


def test_the_models_listing_tells_each_route_and_its_quality_source(client) -> None:
    capabilities = client.get("/api/v1/models").json()["capabilities"]
    entry = next(c for c in capabilities if c["capability"] == "transcription")
    assert "CTC" in entry["backend"]
    listing = {e["code"]: e for e in entry["languages"]}
    zul, xho, eng = listing["zul"], listing["xho"], listing["eng"]
    assert zul["supported"] and zul["family"] == "ctc" and zul["model"] == "zul-parrot"
    assert zul["licence"].startswith("not stated") and zul["quality"] == {
        **zul["quality"],
        "measured": False,
        "published": False,
    }
    assert xho["supported"] and xho["family"] == "ctc" and xho["model"] == "mms"
    assert listing["cs-zul"]["supported"] and "isiZulu model" in listing["cs-zul"]["note"]
    assert eng["family"] == "whisper" and eng["quality"]["measured"] is True  # measured here, on real speech
    tsn = listing["tsn"]
    assert not tsn["supported"] and "KHULUMA_SPEECH_LANGUAGE_MODELS" in tsn["note"]


def test_live_routes_stream_isizulu_from_the_ctc_model(client, headers, audio) -> None:
    pcm = (np.concatenate([audio["said_pcm"], silence(0.8)]) * 32767).astype("<i2").tobytes()
    with client.websocket_connect("/ws/stream-transcribe?lang_code=zul", headers=headers) as ws:
        assert ws.receive_json()["type"] == "ready"
        for i in range(0, len(pcm), 3200):
            ws.send_bytes(pcm[i : i + 3200])
        ws.send_text("EOS")
        messages = []
        while not messages or messages[-1]["type"] != "final":
            messages.append(ws.receive_json())
    final = messages[-1]
    assert final["language_code"] == "zul" and final["text"].startswith("ngiyabonga"), final
    assert any(m["type"] == "partial" and m["pending_text"] for m in messages)  # CTC partials along the way

    minted = client.post(
        "/v1/realtime/client_secrets",
        headers=headers,
        json={"session": {"audio": {"input": {"transcription": {"language": "zul"}}}}},
    ).json()
    with client.websocket_connect(
        "/v1/realtime", subprotocols=["realtime", f"vulavula-insecure-api-key.{minted['value']}"]
    ) as ws:
        assert ws.receive_json()["type"] == "session.created"
        for i in range(0, len(pcm), 3200):
            event = {"type": "session.input_audio_buffer.append", "audio": base64.b64encode(pcm[i : i + 3200]).decode()}
            ws.send_text(json.dumps(event))
        ws.send_text(json.dumps({"type": "session.close"}))
        events = []
        while not events or events[-1]["type"] != "session.closed":
            events.append(ws.receive_json())
    completed = [e for e in events if e["type"] == "session.input_transcript.completed"]
    assert completed and all(c["language"] == "zul" for c in completed)
    deltas = "".join(e["delta"] for e in events if e["type"] == "session.input_transcript.delta")
    assert deltas.startswith("ngiyabonga") and PARROT_ZULU.startswith(deltas.split(" ngiyabonga")[0])


def test_a_judged_stream_routes_each_segment_to_the_model_of_its_language(settings, parrot: Path, audio) -> None:
    """A stream settled on isiZulu (the CTC model): a segment its transcript reads as isiZulu stays on it; an English
    one, which Whisper is sure of, is decoded by Whisper and says so."""
    from engines.speech.audio import load_audio
    from engines.speech.pipeline import get_pipeline

    routed = settings.updated({"speech": {"language_models": {"zul": str(parrot)}}})
    pipeline = get_pipeline(routed.speech, routed.data_dir)
    for name, expected in (("setswana", "zul"), ("english", "eng")):
        speech = np.concatenate([load_audio(audio[name]), silence(0.8)])
        step = pipeline.live.step_audio(speech, "zul", commit_before=speech.size / 16_000, judge=True)
        assert step.final and not step.withheld, (name, step)
        assert {s.language_code for s in step.final} == {expected}, (name, step.final)
    assert "report" in " ".join(s.text for s in step.final).lower()  # Whisper's English, not the parrot's


def test_a_ctc_stream_that_ends_with_no_more_speech_gets_its_final_without_decoding_again(
    settings, parrot: Path, audio, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CTC model's partial is its exact decode: the step that commits nothing hands it on (``exact_until``), and
    the last step, with no speech after it, returns it without a forward pass."""
    from engines.speech.pipeline import get_pipeline
    from engines.speech.vad import speech_timestamps

    routed = settings.updated({"speech": {"language_models": {"zul": str(parrot)}}})
    pipeline = get_pipeline(routed.speech, routed.data_dir)
    said = audio["said_pcm"]
    speech = said[: speech_timestamps(said, pad_ms=0)[0]["end"] - 8000]  # cut mid-speech: nothing commits
    step = pipeline.live.step_audio(speech, "zul", commit_before=speech.size / 16_000)
    assert not step.final and step.pending and step.exact_until == pytest.approx(speech.size / 16_000, abs=1e-3)
    recognizer = pipeline.models.route("zul").recognizer
    passes: list[int] = []
    original = type(recognizer).exact_segments
    monkeypatch.setattr(type(recognizer), "exact_segments", lambda *a, **k: passes.append(1) or original(*a, **k))
    ended = np.concatenate([speech, silence(0.6)])
    last = pipeline.live.step_audio(ended, "zul", final=True, exact_tail=(step.pending, step.exact_until))
    assert not passes and [s.text for s in last.pending] == [s.text for s in step.pending]
    more = np.concatenate([ended, audio["said_pcm"]])  # speech after it: decoded again
    pipeline.live.step_audio(more, "zul", final=True, exact_tail=(step.pending, step.exact_until))
    assert passes

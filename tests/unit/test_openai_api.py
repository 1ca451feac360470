"""The OpenAI-compatible routes driven by the official ``openai`` SDK over real HTTP: the ingress (with the
Transcription and TextAnalysis deployments under Serve's local testing mode) runs under uvicorn on a free local
port in a thread, so multipart encoding, server-sent events, status codes and error bodies cross a socket as
they would in production."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import numpy as np
import pytest

from contracts.wer import word_error_rate
from khuluma.app import build_local
from persistence.models import UsageRecord
from tests.conftest import client_for, serving
from tests.speechdata import espeak

openai = pytest.importorskip("openai")

TEXT = "Good morning, how can I help you today? The train to Pretoria leaves from platform four."
SETSWANA = "Batho botlhe ba tsetswe ba gololesegile le go lekalekana ka seriti le ditshwanelo."


class Served:
    def __init__(self, url: str, client: Any) -> None:
        self.url, self.client = url, client


@pytest.fixture(scope="module")
def served(settings) -> Iterator[Served]:
    client = client_for(settings, build_local(settings, ["speech", "text"]))
    with serving(client) as url:
        yield Served(url, client)


@pytest.fixture(scope="module")
def token(make_token) -> str:
    return make_token("openai-co", "sdk")


@pytest.fixture(scope="module")
def sdk(served: Served, token: str):
    return openai.OpenAI(api_key=token, base_url=served.url + "/v1", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return espeak(TEXT, tmp_path_factory.mktemp("openai-audio") / "hello.wav")


def _usage(served: Served, route: str) -> list[tuple[str, float, int]]:
    served.client.context.usage.flush_now()
    with served.client.context.db.session() as s:
        rows = s.query(UsageRecord).filter(UsageRecord.route == route).order_by(UsageRecord.id).all()
        return [(r.status, r.seconds_transcribed, r.tokens) for r in rows]


# --- transcriptions ---------------------------------------------------------------------------------------------


def test_json_transcription_and_its_metering(sdk, served, speech: Path) -> None:
    before = len(_usage(served, "openai_transcriptions"))
    with speech.open("rb") as f:
        result = sdk.audio.transcriptions.create(model="whisper-1", file=f, language="en")
    assert word_error_rate(TEXT, result.text) <= 0.3, result.text
    usage = _usage(served, "openai_transcriptions")
    assert len(usage) == before + 1
    assert usage[-1][0] == "successful" and usage[-1][1] == pytest.approx(6.0, abs=2.0)


@pytest.mark.parametrize("fmt", ["text", "srt", "vtt"])
def test_plain_formats(sdk, speech: Path, fmt: str) -> None:
    with speech.open("rb") as f:
        answer = sdk.audio.transcriptions.create(model="whisper-base", file=f, language="en", response_format=fmt)
    assert isinstance(answer, str)
    if fmt == "text":
        assert word_error_rate(TEXT, answer) <= 0.3, answer
        return
    lines = answer.strip().splitlines()
    if fmt == "srt":
        assert lines[0] == "1" and " --> " in lines[1] and "," in lines[1].split(" --> ")[0]
    else:
        assert lines[0] == "WEBVTT" and " --> " in lines[2] and "." in lines[2].split(" --> ")[0]
    spoken = " ".join(line for line in lines if line and "-->" not in line and not line.isdigit() and line != "WEBVTT")
    assert word_error_rate(TEXT, spoken) <= 0.3, answer


def test_verbose_json_with_words(sdk, speech: Path) -> None:
    with speech.open("rb") as f:
        result = sdk.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="verbose_json", timestamp_granularities=["word"]
        )
    assert result.language == "english" and result.duration == pytest.approx(6.0, abs=2.0)
    assert word_error_rate(TEXT, result.text) <= 0.3
    assert result.segments and result.segments[0].id == 0
    for segment in result.segments:
        assert 0 <= segment.start < segment.end <= result.duration + 0.01
        assert segment.avg_logprob <= 0 and segment.compression_ratio > 0 and segment.tokens == []
    assert result.words and all(w.end >= w.start for w in result.words)
    assert word_error_rate(TEXT, " ".join(w.word for w in result.words)) <= 0.3
    # without the word granularity: no words
    with speech.open("rb") as f:
        plain = sdk.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json")
    assert plain.segments and plain.words is None


def test_stream_sends_deltas_then_done(sdk, speech: Path) -> None:
    with speech.open("rb") as f:
        events = list(sdk.audio.transcriptions.create(model="whisper-1", file=f, language="en", stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    assert len(kinds) >= 2
    deltas = "".join(e.delta for e in events[:-1])
    assert word_error_rate(events[-1].text, deltas) <= 0.1
    assert word_error_rate(TEXT, events[-1].text) <= 0.3


def test_translation_of_english_audio_is_its_transcript(sdk, speech: Path) -> None:
    with speech.open("rb") as f:
        result = sdk.audio.translations.create(model="whisper-1", file=f)
    assert word_error_rate(TEXT, result.text) <= 0.3


def test_translation_without_a_model_is_an_honest_503(sdk, served, tmp_path: Path) -> None:
    wav = espeak("Les enfants jouent au football dans le parc après l'école.", tmp_path / "fr.wav", voice="fr")
    before = len(_usage(served, "openai_translations"))
    # OpenAI's translations take no language; Khuluma accepts it as an extension (espeak-ng French is too robotic
    # for Whisper base to detect reliably)
    with wav.open("rb") as f, pytest.raises(openai.InternalServerError) as info:
        sdk.audio.translations.create(model="whisper-1", file=f, extra_body={"language": "fr"})
    assert info.value.status_code == 503
    error = info.value.body
    assert error["code"] == "model_not_installed" and error["type"] == "server_error"
    assert "French" in error["message"] and "khuluma models pull" in error["message"]
    assert _usage(served, "openai_translations")[before:] == [("failed", 0.0, 0)]


# --- errors -----------------------------------------------------------------------------------------------------


def test_unknown_model_and_bad_fields_answer_openai_errors(sdk, speech: Path) -> None:
    with speech.open("rb") as f, pytest.raises(openai.NotFoundError) as info:
        sdk.audio.transcriptions.create(model="gpt-4o-transcribe", file=f)
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"
    with speech.open("rb") as f, pytest.raises(openai.BadRequestError) as bad:
        sdk.audio.transcriptions.create(model="whisper-1", file=f, response_format="json", temperature=3)
    assert bad.value.body["param"] == "temperature" and bad.value.body["type"] == "invalid_request_error"
    with speech.open("rb") as f, pytest.raises(openai.BadRequestError) as words:
        sdk.audio.transcriptions.create(model="whisper-1", file=f, timestamp_granularities=["word"])
    assert words.value.body["param"] == "timestamp_granularities[]"


def test_language_refusals_name_the_language_field(sdk, speech: Path, tmp_path: Path) -> None:
    # isiZulu has no model on the offline default: a clear 400 naming the setting
    with speech.open("rb") as f, pytest.raises(openai.BadRequestError) as zulu:
        sdk.audio.transcriptions.create(model="whisper-1", file=f, language="zu")
    assert zulu.value.body["param"] == "language" and zulu.value.body["code"] == "unsupported_language"
    assert "KHULUMA_SPEECH_LANGUAGE_MODELS" in zulu.value.body["message"]
    # audio most likely in a language without a model (espeak-ng Setswana), no language given: LanguageNotServed
    wav = espeak(SETSWANA + " " + SETSWANA, tmp_path / "tn.wav", voice="tn")
    with wav.open("rb") as f, pytest.raises(openai.BadRequestError) as unserved:
        sdk.audio.transcriptions.create(model="whisper-1", file=f)
    assert "without a speech model" in unserved.value.body["message"]
    assert unserved.value.body["code"] == "unsupported_language"


def test_bearer_auth_and_its_refusals(served: Served, token: str, speech: Path) -> None:
    bad = openai.OpenAI(api_key="not-a-token", base_url=served.url + "/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.models.list()
    assert info.value.status_code == 401
    assert info.value.body["message"].startswith("Incorrect API key provided")
    assert info.value.body["code"] == "invalid_api_key"
    missing = httpx.get(served.url + "/v1/models")
    assert missing.status_code == 401 and set(missing.json()["error"]) == {"message", "type", "param", "code"}
    assert "didn't provide an API key" in missing.json()["error"]["message"]
    # the same token as X-CLIENT-TOKEN, HTTP Basic (token as the password) or x-api-key
    for headers, auth in (
        ({"X-CLIENT-TOKEN": token}, None),
        ({}, ("anyone", token)),
        ({"x-api-key": token}, None),
    ):
        assert httpx.get(served.url + "/v1/models", headers=headers, auth=auth).status_code == 200
    # the native routes keep their own shape
    native = httpx.post(served.url + "/api/v1/sentiment_analysis/process", json={"encoded_text": "hi"})
    assert native.status_code == 401 and native.json() == {"detail": "Missing X-CLIENT-TOKEN header."}


def test_openai_413_has_the_openai_shape(local_app, make_token) -> None:
    client = local_app(max_json_mb=0.001)
    headers = {"Authorization": f"Bearer {make_token()}"}
    r = client.post("/v1/embeddings", json={"model": "m", "input": "x" * 5000}, headers=headers)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    native = client.post("/api/v1/sentiment_analysis/process", json={"encoded_text": "x" * 5000}, headers=headers)
    assert native.status_code == 413 and "detail" in native.json()
    missing = client.get("/v1/nothing-here", headers=headers)
    assert missing.status_code == 404 and "detail" in missing.json()  # not an OpenAI route
    unknown = client.get("/v1/audio/nothing", headers=headers)
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "invalid_request_error"


# --- embeddings and models --------------------------------------------------------------------------------------


def test_embeddings_float_base64_and_lists(sdk, served) -> None:
    model = next(m.id for m in sdk.models.list() if "e5" in m.id)
    single = sdk.embeddings.create(model=model, input="Ngiyabonga kakhulu")
    assert single.object == "list" and single.model == model and len(single.data) == 1
    vector = np.array(single.data[0].embedding, dtype=np.float32)
    assert vector.shape == (384,) and np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-3)
    assert single.usage.prompt_tokens == 2 and single.usage.total_tokens == 2
    # the SDK asks for base64 by default and decodes it; ask explicitly and decode it here too
    raw = served.client.post(
        "/v1/embeddings",
        json={"model": model, "input": "Ngiyabonga kakhulu", "encoding_format": "base64"},
        headers={"Authorization": f"Bearer {sdk.api_key}"},
    ).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, vector, atol=1e-6)
    batch = sdk.embeddings.create(model=model, input=["Ngiyabonga kakhulu", "Thank you very much", "Dankie"])
    assert [d.index for d in batch.data] == [0, 1, 2]
    assert np.allclose(batch.data[0].embedding, vector, atol=1e-4)
    thanks = np.array([d.embedding for d in batch.data])
    assert thanks[1] @ thanks[2] > 0.7  # the same meaning in two languages lies close


def test_embeddings_refusals(sdk) -> None:
    model = next(m.id for m in sdk.models.list() if "e5" in m.id)
    with pytest.raises(openai.BadRequestError) as tokens:
        sdk.embeddings.create(model=model, input=[[1, 2, 3]])
    assert "token-id arrays" in tokens.value.body["message"]
    with pytest.raises(openai.BadRequestError) as dims:
        sdk.embeddings.create(model=model, input="x", dimensions=128)
    assert dims.value.body["param"] == "dimensions"
    with pytest.raises(openai.BadRequestError) as empty:
        sdk.embeddings.create(model=model, input=["fine", "  "])
    assert empty.value.body["param"] == "input"
    with pytest.raises(openai.NotFoundError):
        sdk.embeddings.create(model="text-embedding-3-small", input="x")


def test_models_list_and_retrieve(sdk) -> None:
    ids = [m.id for m in sdk.models.list()]
    assert ids[0] == "whisper-1" and "whisper-base" in ids and any("multilingual-e5-small" in i for i in ids)
    model = sdk.models.retrieve("whisper-1")
    assert model.owned_by == "khuluma" and model.object == "model" and model.created > 0
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("gpt-4o")


# --- chat completions (the language model: a tiny random Llama-architecture model, CTranslate2 int8) ------------


@pytest.fixture(scope="module")
def chat(settings, tiny_llm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Served]]:
    """The SDK against an ingress with the Search and LLM deployments, and a knowledge base of one notice."""
    s = settings.updated(
        {
            "search": {"chroma_path": tmp_path_factory.mktemp("chat") / "chroma"},
            "llm": {"model": str(tiny_llm.ct2), "threads": 1, "max_answer_tokens": 10},
        }
    )
    handles = build_local(s, ["search", "llm"])
    client = client_for(s, handles)
    with serving(client) as url:
        yield url, Served(url, client)
    handles["search"].close.remote().result()


@pytest.fixture(scope="module")
def chat_sdk(chat, make_token):
    url, _ = chat
    return openai.OpenAI(api_key=make_token("chat-co", "sdk"), base_url=url + "/v1", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def notices(chat, chat_sdk) -> str:
    url, _ = chat
    headers = {"X-CLIENT-TOKEN": chat_sdk.api_key}
    kb = httpx.post(f"{url}/api/v1/search/knowledgebase", headers=headers, json={"knowledgebase_name": "n"}).json()
    text = b"Water interruption: Ward 23 (Chatsworth) has no water on 21 May from 08:00 to 15:00."
    files = {"file": ("water.txt", text, "text/plain")}
    assert httpx.post(f"{url}/api/v1/search/knowledgebase/{kb['id']}/document", headers=headers, files=files).is_success
    return kb["id"]


HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sawubona! When is the water off?"}]


def test_a_chat_completion_and_its_usage(chat_sdk, chat) -> None:
    _, served = chat
    before = len(_usage(served, "chat_completions"))
    model = next(m.id for m in chat_sdk.models.list() if m.id == "ct2")
    completion = chat_sdk.chat.completions.create(model=model, messages=HELLO, temperature=0)
    choice = completion.choices[0]
    assert (
        completion.object == "chat.completion" and completion.model == "ct2" and completion.id.startswith("chatcmpl-")
    )
    assert choice.message.role == "assistant" and choice.message.content and choice.finish_reason == "length"
    assert completion.usage.completion_tokens == 10 and completion.usage.prompt_tokens > 10
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 10
    assert (completion.model_extra or {}).get("citations") is None  # no knowledge base, no citations
    sampled = chat_sdk.chat.completions.create(model=model, messages=HELLO, temperature=1.0, top_p=0.9, stop=["\n\n"])
    assert sampled.choices[0].finish_reason in ("stop", "length") and sampled.usage.completion_tokens <= 10
    shorter = chat_sdk.chat.completions.create(model=model, messages=HELLO, max_completion_tokens=3, temperature=0)
    assert shorter.usage.completion_tokens == 3
    assert choice.message.content.startswith(shorter.choices[0].message.content)  # greedy: the same start
    rows = _usage(served, "chat_completions")[before:]
    assert [status for status, _, _ in rows] == ["successful"] * 3
    asked = " ".join(m["content"] for m in HELLO)
    assert rows[0][2] == len(asked.split()) + len(choice.message.content.split())


def test_a_streamed_chat_completion(chat_sdk) -> None:
    whole = chat_sdk.chat.completions.create(model="ct2", messages=HELLO, temperature=0).choices[0].message.content
    chunks = list(
        chat_sdk.chat.completions.create(
            model="ct2", messages=HELLO, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10


def test_a_knowledge_base_grounds_the_chat_with_citations(chat_sdk, notices) -> None:
    question = [{"role": "user", "content": "When will Chatsworth have no water?"}]
    grounded = chat_sdk.chat.completions.create(
        model="ct2", messages=question, temperature=0, extra_body={"knowledge_base": notices}
    )
    (citation,) = grounded.model_extra["citations"]
    assert citation["id"] == 1 and citation["filename"] == "water.txt" and "Chatsworth" in citation["text"]
    assert grounded.usage.prompt_tokens > 60  # the grounding instruction and the passage are in the prompt
    assert citation["cited"] == ("[1]" in (grounded.choices[0].message.content or ""))  # set once the answer is whole
    streamed = list(
        chat_sdk.chat.completions.create(
            model="ct2", messages=question, temperature=0, stream=True, extra_body={"knowledge_base": notices}
        )
    )
    assert streamed[0].model_extra["citations"][0]["document_id"] == citation["document_id"]
    refused = chat_sdk.chat.completions.create(
        model="ct2",
        messages=[{"role": "user", "content": "Who won the Rugby World Cup final in 2019?"}],
        extra_body={"knowledge_base": notices},
    )
    assert refused.choices[0].message.content == "I don't know from these documents."
    assert refused.model_extra["citations"] == [] and refused.usage.total_tokens == 0
    with pytest.raises(openai.NotFoundError):  # another customer's, or no such knowledge base
        chat_sdk.chat.completions.create(model="ct2", messages=question, extra_body={"knowledge_base": str(uuid4())})


def test_chat_refusals_are_openai_errors(chat_sdk) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        chat_sdk.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert unknown.value.body["code"] == "model_not_found" and "ct2" in unknown.value.body["message"]
    with pytest.raises(openai.BadRequestError) as too_long:
        chat_sdk.chat.completions.create(model="ct2", messages=[{"role": "user", "content": "clinic " * 600}])
    assert too_long.value.body["param"] == "messages" and "context window" in too_long.value.body["message"]
    with pytest.raises(openai.BadRequestError) as many:
        chat_sdk.chat.completions.create(model="ct2", messages=HELLO, n=2)
    assert many.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as images:
        chat_sdk.chat.completions.create(
            model="ct2", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
        )
    assert "only text parts" in images.value.body["message"]

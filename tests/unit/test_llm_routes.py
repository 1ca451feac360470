"""The ask route (``POST /api/v1/search/knowledgebase/{id}/ask``) through the ingress, with the Search and LLM
deployments (a tiny random Llama-architecture model converted to CTranslate2 int8) under Serve's local testing
mode: retrieval, the refusal rule, prompt assembly within the context window, citations, streaming, the answer's
language, tenancy, metering and the 503s. The model's words are random: the tests assert structure and plumbing."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from contracts.llm import REFUSAL
from contracts.settings import Settings
from khuluma.app import build_local
from persistence.models import UsageRecord
from tests.conftest import client_for

KB = "/api/v1/search/knowledgebase"
CLINIC = (
    "Mamelodi East Community Health Centre is open from Monday to Friday, 07:00 to 16:00, and on Saturdays from "
    "08:00 to 12:00. The facility manager is Sister Nomvula Khoza. Bring your clinic card to every visit."
)
WATER = (
    "Water interruption notice: Ward 23 (Chatsworth) will have no water on 21 May from 08:00 to 15:00 while the "
    "Bayview reservoir is cleaned. Residents should store water the night before."
)
QUESTION = "What time does the Mamelodi clinic close on Saturdays?"
RUGBY = "Who won the Rugby World Cup final in 2019?"
ANSWER_TOKENS = 12


def _settings(settings: Settings, tmp_path: Path, model: Path | None, **changes: Any) -> Settings:
    llm = {"threads": 1, "max_answer_tokens": ANSWER_TOKENS, **changes.pop("llm", {})}
    if model is not None:
        llm["model"] = str(model)
    return settings.updated({"search": {"chroma_path": tmp_path / "chroma"}, "llm": llm, **changes})


@pytest.fixture(scope="module")
def app(settings: Settings, tiny_llm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    s = _settings(settings, tmp_path_factory.mktemp("ask"), tiny_llm.ct2)
    handles = build_local(s, ["search", "llm"])
    yield client_for(s, handles)
    handles["search"].close.remote().result()


@pytest.fixture(scope="module")
def tokens(make_token) -> tuple[dict[str, str], dict[str, str]]:
    tag = uuid.uuid4().hex[:8]
    return ({"X-CLIENT-TOKEN": make_token(f"ask-alice-{tag}")}, {"X-CLIENT-TOKEN": make_token(f"ask-bob-{tag}")})


def _kb(client: Any, headers: dict[str, str], *documents: tuple[str, str]) -> str:
    kb = client.post(KB, json={"knowledgebase_name": "notices"}, headers=headers).json()["id"]
    for name, text in documents:
        r = client.post(
            f"{KB}/{kb}/document", headers=headers, files={"file": (name, io.BytesIO(text.encode()), "text/plain")}
        )
        assert r.status_code == 200, r.text
    return kb


@pytest.fixture(scope="module")
def kb(app, tokens) -> str:
    return _kb(app, tokens[0], ("clinic.txt", CLINIC), ("water.txt", WATER))


def _ask(client: Any, headers: dict[str, str], kb_id: str, **body: Any) -> Any:
    return client.post(f"{KB}/{kb_id}/ask", headers=headers, json={"question": QUESTION, **body})


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append((lines["event"], data))
    return events


def _usage(client: Any, customer_headers: dict[str, str], route: str = "knowledgebase_ask") -> list[tuple[str, int]]:
    ctx = client.context
    ctx.usage.flush_now()
    principal = ctx.tokens.verify(customer_headers["X-CLIENT-TOKEN"])
    with ctx.db.session() as s:
        rows = s.scalars(
            select(UsageRecord)
            .where(UsageRecord.route == route, UsageRecord.customer_id == principal.customer_id)
            .order_by(UsageRecord.id)
        ).all()
        return [(r.status, r.tokens) for r in rows]


# --- answers -------------------------------------------------------------------------------------------------------


def test_an_answer_comes_with_its_citations(app, tokens, kb) -> None:
    r = _ask(app, tokens[0], kb)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "ct2" and body["language"] == "eng" and not body["refused"]
    assert body["answer"] and body["usage"]["completion_tokens"] == ANSWER_TOKENS
    assert body["usage"]["prompt_tokens"] + ANSWER_TOKENS <= 512  # the tiny model's context window
    citations = body["citations"]
    assert [c["id"] for c in citations] == list(range(1, len(citations) + 1))
    assert citations[0]["filename"] == "clinic.txt" and citations[0]["chunk_index"] == 0
    assert citations[0]["document_id"] and CLINIC.startswith(citations[0]["text"][:60])
    assert citations[0]["score"] == 1.0 and all(0 < c["score"] <= 1 for c in citations)
    assert all(isinstance(c["cited"], bool) for c in citations)


def test_the_stream_sends_citations_first_then_the_answer(app, tokens, kb) -> None:
    r = _ask(app, tokens[0], kb, stream=True)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    kinds = [kind for kind, _ in events]
    # (text that piles up while the event loop is busy goes as one delta: the tiny model is that fast)
    assert kinds[0] == "citations" and kinds[-1] == "done" and set(kinds[1:-1]) == {"delta"}
    first, done = events[0][1], events[-1][1]
    assert first["citations"] and first["model"] == "ct2" and first["language"] == "eng"
    assert "".join(data["text"] for kind, data in events if kind == "delta").strip() == done["answer"]
    assert [c["document_id"] for c in first["citations"]] == [c["document_id"] for c in done["citations"]]
    assert done["usage"]["completion_tokens"] == ANSWER_TOKENS


def test_nothing_relevant_is_a_refusal_without_the_model(app, tokens, kb) -> None:
    for question in (RUGBY, "How do I bake a chocolate cake without eggs?"):
        body = _ask(app, tokens[0], kb, question=question).json()
        assert body["answer"] == REFUSAL and body["refused"] and body["citations"] == []
        assert body["model"] is None and body["usage"] is None  # no model ran
        assert any("close enough" in w for w in body["warnings"])
    empty = _kb(app, tokens[0])
    body = _ask(app, tokens[0], empty).json()
    assert body["refused"] and body["citations"] == [] and body["model"] is None
    events = _events(_ask(app, tokens[0], empty, stream=True).text)
    assert [k for k, _ in events] == ["citations", "delta", "done"] and events[1][1]["text"] == REFUSAL


def test_passages_that_do_not_fit_the_window_are_cut_or_left_out(app, tokens) -> None:
    long_clinic = " ".join([CLINIC] * 6)  # chunks of 800 characters: several passages, none fits whole beside others
    kb_id = _kb(app, tokens[0], ("clinic-long.txt", long_clinic), ("water.txt", WATER))
    body = _ask(app, tokens[0], kb_id, top_k=10).json()
    assert not body["refused"] and body["citations"]
    passages = app.post(f"{KB}/{kb_id}/query", headers=tokens[0], json={"query": QUESTION, "top_k": 10}).json()[
        "search_result"
    ]
    assert len(body["citations"]) < len(passages)  # not all fit 512 tokens
    assert [c["text"] for c in body["citations"]] == [p["text"] for p in passages[: len(body["citations"])]]
    assert [c["truncated"] for c in body["citations"]][:-1] == [False] * (len(body["citations"]) - 1)
    assert body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] <= 512


def test_the_answer_is_in_english_with_a_warning_naming_the_missing_model(app, tokens, kb) -> None:
    body = _ask(app, tokens[0], kb, question="Ikliniki yaseMamelodi ivala nini ngoMgqibelo?", lang="zu").json()
    assert body["language"] == "eng"  # (the tiny model's random words are withheld: then it is the refusal)
    (warning,) = [w for w in body["warnings"] if "This answer is in English" in w]
    assert "isiZulu" in warning and "KHULUMA_TRANSLATION_MODEL" in warning and "KHULUMA_LLM_LANGUAGES" in warning


def test_a_model_that_writes_the_language_answers_in_it(settings, tiny_llm, tokens, tmp_path) -> None:
    s = _settings(settings, tmp_path, tiny_llm.ct2, llm={"languages": ["eng", "zul"]})
    handles = build_local(s, ["search", "llm"])
    try:
        client = client_for(s, handles)
        kb_id = _kb(client, tokens[0], ("clinic.txt", CLINIC))
        body = _ask(client, tokens[0], kb_id, lang="isiZulu").json()
        assert body["language"] == "zul" and body["translated_with"] is None
        assert not [w for w in body["warnings"] if "English" in w]
        models = {c["capability"]: c for c in client.get("/api/v1/models").json()["capabilities"]}
        served = {lang["code"] for lang in models["llm"]["languages"] if lang["supported"]}
        assert served == {"eng", "zul"}
    finally:
        handles["search"].close.remote().result()


def test_translation_carries_the_question_and_the_answer(settings, tiny_llm, tiny_nllb, tokens, tmp_path) -> None:
    # the tiny NLLB's translations are random: kept short, so the translated question fits the tiny model's window
    s = _settings(settings, tmp_path, tiny_llm.ct2, translation={"model": str(tiny_nllb.ct2), "max_length": 24})
    handles = build_local(s, ["search", "llm", "translation"])
    try:
        client = client_for(s, handles)
        kb_id = _kb(client, tokens[0], ("clinic.txt", CLINIC))
        zulu = "Ikliniki yaseMamelodi ivala nini ngoMgqibelo?"
        r = _ask(client, tokens[0], kb_id, question=zulu, lang="zul")
        body = r.json()
        assert r.status_code == 200 and body["language"] == "zul" and body["translated_with"] == str(tiny_nllb.ct2)
        assert any("Answered through translation" in w for w in body["warnings"])
        streamed = _ask(client, tokens[0], kb_id, question=zulu, lang="zul", stream=True)
        assert streamed.status_code == 200, streamed.text
        events = _events(streamed.text)
        deltas = [data["text"] for kind, data in events if kind == "delta"]
        assert len(deltas) == 1 and deltas[0] == events[-1][1]["answer"]  # the translated answer comes whole
    finally:
        handles["search"].close.remote().result()


# --- tenancy, metering, errors -----------------------------------------------------------------------------------


def test_another_customers_knowledge_base_is_not_found(app, tokens, kb) -> None:
    other = _ask(app, tokens[1], kb)
    unknown = _ask(app, tokens[0], str(uuid.uuid4()))
    assert other.status_code == unknown.status_code == 404
    assert other.json() == unknown.json() == {"detail": "Knowledge base not found."}
    assert _ask(app, tokens[1], kb, stream=True).status_code == 404  # before any event
    assert _ask(app, tokens[0], "not-a-uuid").status_code == 400
    assert _ask(app, {}, kb).status_code == 401


def test_every_answer_is_metered(app, tokens, kb) -> None:
    alice = tokens[0]
    before = _usage(app, alice)
    answer = _ask(app, alice, kb).json()["answer"]
    _ask(app, alice, kb, stream=True)
    _ask(app, alice, kb, question=RUGBY)
    rows = _usage(app, alice)[len(before) :]
    assert [status for status, _ in rows] == ["successful"] * 3
    assert rows[0][1] == len(QUESTION.split()) + len(answer.split())
    assert rows[2][1] == len(RUGBY.split()) + len(REFUSAL.split())
    assert _usage(app, tokens[1]) == []  # refused requests of the other customer are not billed to anyone


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"question": "  "}, "question"),
        ({"question": "x" * 2001}, "question"),
        ({"question": "When?", "lang": "klingon"}, "lang"),
        ({"question": "When?", "top_k": 0}, "top_k"),
        ({"question": "When?", "top_k": 21}, "top_k"),
    ],
)
def test_bad_requests_name_the_field(app, tokens, kb, body: dict[str, Any], field: str) -> None:
    r = app.post(f"{KB}/{kb}/ask", headers=tokens[0], json=body)
    assert r.status_code == 400 and f"'{field}'" in r.json()["detail"]


def test_a_question_longer_than_the_window_is_400(app, tokens, kb) -> None:
    r = _ask(app, tokens[0], kb, question="clinic " * 280 + "Saturday?")
    assert r.status_code == 400 and "field 'question'" in r.json()["detail"] and "context window" in r.json()["detail"]


def test_a_fresh_install_answers_extractively(local_app, make_token, tmp_path: Path) -> None:
    # a fresh install: search (its own embedded store: the session's may be held by the Serve app), no language model
    client = local_app(["search"], search={"chroma_path": tmp_path / "chroma"})
    headers = {"X-CLIENT-TOKEN": make_token(f"fresh-{uuid.uuid4().hex[:6]}")}
    kb_id = _kb(client, headers, ("clinic.txt", CLINIC), ("water.txt", WATER))
    body = client.post(f"{KB}/{kb_id}/ask", headers=headers, json={"question": QUESTION}).json()
    assert body["model"] == "extractive" and not body["refused"] and body["language"] == "eng"
    assert "12:00" in body["answer"] and "[1]" in body["answer"]  # the passage's own sentence, cited
    assert {s["origin"] for s in body["sentences"]} == {"extracted"}
    assert all(s["text"].split(" [")[0] in CLINIC + WATER for s in body["sentences"])
    assert body["citations"][0]["filename"] == "clinic.txt" and body["citations"][0]["cited"]
    events = _events(
        client.post(f"{KB}/{kb_id}/ask", headers=headers, json={"question": QUESTION, "stream": True}).text
    )
    assert events[0][0] == "citations" and events[-1][0] == "done"
    assert "".join(d["text"] for k, d in events if k == "delta") == events[-1][1]["answer"]
    refused = client.post(f"{KB}/{kb_id}/ask", headers=headers, json={"question": "Who is the mayor of Soweto?"})
    assert refused.json()["refused"] and refused.json()["answer"] == REFUSAL
    grounded = client.post(
        "/v1/chat/completions",
        headers=headers,
        json={"model": "extractive", "messages": [{"role": "user", "content": QUESTION}], "knowledge_base": kb_id},
    )
    assert grounded.status_code == 200 and grounded.json()["choices"][0]["message"]["content"] == body["answer"]
    chat = client.post(
        "/v1/chat/completions", headers=headers, json={"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert chat.status_code == 503 and chat.json()["error"]["code"] == "model_not_installed"
    assert "KHULUMA_LLM_MODEL" in chat.json()["error"]["message"]
    llm = next(c for c in client.get("/api/v1/models").json()["capabilities"] if c["capability"] == "llm")
    assert llm["installed"] is True and llm["model"] == "extractive" and "fact recall" in llm["note"]
    assert "llm" not in {d["name"] for d in client.get("/api/v1/health").json()["deployments"]}


def test_health_and_models_list_the_language_model(app) -> None:
    assert {"name": "llm", "healthy": True} in app.get("/api/v1/health").json()["deployments"]
    llm = next(c for c in app.get("/api/v1/models").json()["capabilities"] if c["capability"] == "llm")
    assert llm["installed"] and llm["model"] == "ct2" and llm["backend"].startswith("ctranslate2")
    assert "512 tokens" in llm["note"]


@pytest.mark.parametrize(
    "answer",
    [
        "It closes at 12:00 on Saturdays [1]. The manager is Sister Khoza [1, 2].",
        "I don't know from these documents.",
        "Water is off on 21 May [2]",
        "[1] Opens at eight.",
        "",
    ],
)
def test_an_answer_is_translated_between_its_citation_markers(answer: str) -> None:
    from engines.search.sentences import cited as cited_numbers
    from serve_app.services.answer_language import translatable

    pieces = translatable(answer)
    assert "".join(text for text, _ in pieces) == answer  # nothing lost or added
    words = [text for text, translate in pieces if translate]
    assert all("[" not in w and w == w.strip() and w[0] not in ".,;:!?" for w in words)
    kept = "".join(text for text, translate in pieces if not translate)
    assert cited_numbers(kept) == cited_numbers(answer)  # every marker stays, untranslated

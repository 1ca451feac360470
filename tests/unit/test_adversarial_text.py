"""Adversarial text: inputs built to cost work or to break the edge, refused (or survived) the same way everywhere.

- Size limits counted by what costs work (characters, UTF-8 bytes, the longest run without whitespace), checked by
  each route's service before any hop: these clients have NO deployment bound, so a request that got as far as a
  hop would answer 503 (404 for a knowledge base that is not there), not 400.
- Lone surrogates in any text field of a JSON body: 400 naming the field, at the edge (a valid pair reaches NER:
  tests/unit/test_text_routes.py).
- One bad item of a ``@batched`` batch fails only its own caller.
- Usage report dates: year 9999 and non-ASCII digits.
- NER on decomposed (NFD) text keeps the combining marks inside words, offsets into the text as sent.
- ``GET /ws/stream-transcribe``: OpenAPI says what it answers (an empty 200).
"""

from __future__ import annotations

import asyncio
import json
import typing
import unicodedata
import uuid
from typing import Any

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from deployments.serve_batch import batched
from serve_app.app import create_app

NO_SPACES = "a" * 1_200_000  # the reported input: ~1.2 MB, one "token"
KB = "/api/v1/search/knowledgebase"


@pytest.fixture()
def client(local_app):
    return local_app()  # no deployments: a request that reaches a hop answers 503


@pytest.fixture()
def headers(make_token):
    return {"X-CLIENT-TOKEN": make_token("adversarial-text")}


def _post(client, path: str, body: dict[str, Any] | str, headers: dict[str, str]):
    data = body if isinstance(body, str) else json.dumps(body)  # json.dumps keeps "\ud800" as its escape
    return client.post(path, content=data, headers={**headers, "Content-Type": "application/json"})


def _classify(inputs: list[str], example: str = "hello there") -> dict[str, Any]:
    return {
        "examples": [
            {"intent": "greeting", "example": example},
            {"intent": "greeting", "example": "good morning"},
            {"intent": "balance", "example": "what is my balance"},
            {"intent": "balance", "example": "how much money do I have"},
        ],
        "inputs": inputs,
    }


# --- 1. size limits, before any hop ------------------------------------------------------------------------------

TEXT_ROUTES = [
    ("/api/v1/entity_recognition/process", lambda t: {"encoded_text": t}, "encoded_text"),
    ("/api/v1/sentiment_analysis/process", lambda t: {"encoded_text": t}, "encoded_text"),
    ("/api/v1/language/detect", lambda t: {"text": t}, "text"),
    ("/api/v1/language/detect", lambda t: {"text": t, "spans": True}, "text"),
    ("/api/v1/classify", lambda t: _classify(["hi", t]), "inputs"),
    ("/api/v1/classify", lambda t: _classify(["hi"], example=t), "examples"),
    (
        "/api/v1/translate/process",
        lambda t: {"input_text": t, "source_lang": "eng_Latn", "target_lang": "zul_Latn"},
        "input_text",
    ),
    (f"{KB}/{uuid.uuid4()}/query", lambda t: {"query": t}, "query"),
]


@pytest.mark.parametrize(("path", "body", "field"), TEXT_ROUTES)
@pytest.mark.parametrize(
    "text",
    [
        NO_SPACES,  # over the character limit (it passed the 2,000-token limit: one "token")
        "😀" * 70_000,  # 70,000 characters, 280,000 bytes
        "ab " * 3000 + "x" * 5000,  # 14,000 characters, one run of 5,000 without whitespace
    ],
    ids=["1.2MB-no-spaces", "bytes", "long-run"],
)
def test_oversized_text_is_refused_with_400_naming_the_field_before_any_hop(client, headers, path, body, field, text):
    r = _post(client, path, body(text), headers)
    assert r.status_code == 400, r.text  # not 503 (no deployment here) or 404 (no such knowledge base)
    assert f"field '{field}'" in r.json()["detail"], r.json()


def test_each_size_limit_names_the_field_and_the_limit(local_app, client, headers):
    path, make, field = TEXT_ROUTES[0]
    cases = {
        NO_SPACES: "1,200,000 characters; the limit is 100,000 characters",
        "😀" * 70_000: "280,000 bytes as UTF-8; the limit is 262,144 bytes",
        "x" * 2_001: "2,001 characters without whitespace in a row; the limit is 2,000",
    }
    for text, expected in cases.items():
        r = _post(client, path, make(text), headers)
        assert r.status_code == 400 and f"field '{field}'" in r.json()["detail"], r.text
        assert expected in r.json()["detail"]
    r = _post(client, "/api/v1/classify", _classify(["ab " * 20_000, "cd " * 20_000]), headers)
    assert "field 'inputs' has 120,000 characters in all" in r.json()["detail"]
    # the limits are settings of the text section
    small = local_app(text={"max_chars": 10, "max_bytes": 8, "max_word_chars": 3})
    assert "the limit is 10 characters" in _post(small, path, make("a b c d e f g"), headers).json()["detail"]
    assert "the limit is 8 bytes" in _post(small, path, make("a b c d e"), headers).json()["detail"]
    assert "the limit is 3 (split" in _post(small, path, make("abcd"), headers).json()["detail"]


def test_translation_has_its_own_character_limit(client, headers):
    r = _post(
        client,
        "/api/v1/translate/process",
        {"input_text": "ab " * 7000, "source_lang": "eng_Latn", "target_lang": "zul_Latn"},
        headers,
    )
    assert (
        r.status_code == 400 and "field 'input_text' has 21,000 characters; the limit is 20,000" in r.json()["detail"]
    )


def test_every_legitimate_2000_token_text_fits_the_size_limits(settings):
    from serve_app.services.text import check_text
    from serve_app.services.text_limits import TextLimits

    limits = TextLimits.of(settings)
    long_words = " ".join(["Ngiyabongakakhulungokusizakwakho"] * 2000)  # 2,000 tokens of 32 characters
    ethiopic = " ".join(["ሰላምታሰላምታሰላምታሰላምታሰላምታሰላምታሰላምታ"] * 2000)  # 3 bytes a character
    url = "see https://example.org/" + "p" * 1500 + " " + "ok " * 1998
    emoji = " ".join(["👍🏽🎉"] * 2000)
    for text in (long_words, ethiopic, url, emoji):
        assert check_text(text, limits, settings.text.max_tokens) <= 2000


# --- 2. lone surrogates: 400 naming the field, at the edge -------------------------------------------------------

SURROGATE_BODIES = [
    ("/api/v1/entity_recognition/process", {"encoded_text": "Thandi\ud800"}, "encoded_text"),
    ("/api/v1/sentiment_analysis/process", {"encoded_text": "\udfffhappy"}, "encoded_text"),
    ("/api/v1/language/detect", {"text": "Sawubona \ud83d"}, "text"),
    ("/api/v1/classify", _classify(["hi", "x\ud800"]), "inputs.1"),
    ("/api/v1/classify", _classify(["hi"], example="hello \udc00"), "examples.0.example"),
    (
        "/api/v1/translate/process",
        {"input_text": "a\ud800", "source_lang": "eng_Latn", "target_lang": "zul_Latn"},
        "input_text",
    ),
    (
        "/api/v1/translate/process",
        {"input_text": "a", "source_lang": "eng\ud800", "target_lang": "zul_Latn"},
        "source_lang",
    ),
    (f"{KB}/{uuid.uuid4()}/query", {"query": "\ud800"}, "query"),
    (f"{KB}/{uuid.uuid4()}/query", {"query": "water", "language": "zu\ud800"}, "language"),
    (KB, {"knowledgebase_name": "kb\ud800"}, "knowledgebase_name"),
    ("/api/v1/transcribe/sync", {"file_name": "a\ud800.wav", "audio_blob": "AAAA", "file_size": 3}, "file_name"),
]


@pytest.mark.parametrize(("path", "body", "field"), SURROGATE_BODIES)
def test_lone_surrogates_are_refused_with_400_naming_the_field(client, headers, path, body, field):
    r = _post(client, path, body, headers)
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert f"field '{field}'" in detail and "not valid Unicode" in detail, detail


def _is_checked(annotation: Any) -> bool:
    """Every ``str`` inside ``annotation`` (lists, optionals, nested models) is the checked UnicodeText."""
    from contracts.unicode import _valid_unicode

    if annotation is str:
        return False
    if typing.get_origin(annotation) is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        if base is str:
            return any(getattr(m, "func", None) is _valid_unicode for m in meta)
        return _is_checked(base)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return all(_field_checked(f) for f in annotation.model_fields.values())
    return all(_is_checked(a) for a in typing.get_args(annotation))


def _field_checked(field: Any) -> bool:
    from contracts.unicode import _valid_unicode

    if field.annotation is str:
        return any(getattr(m, "func", None) is _valid_unicode for m in field.metadata)
    return _is_checked(field.annotation)


def _api_routes(routes: list[Any]) -> list[APIRoute]:
    out: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            out.append(route)
        inner = getattr(route, "original_router", None)  # an included router (newer FastAPI keeps it whole)
        if inner is not None:
            out.extend(_api_routes(inner.routes))
    return out


def test_every_json_body_string_field_of_the_app_is_checked_unicode():
    """The class, not the instances: a new body model with a plain ``str`` field fails here."""
    bodies = []
    for route in _api_routes(create_app().routes):
        if route.body_field is not None:
            model = route.body_field.field_info.annotation
            bodies.append(model)
            assert _is_checked(model), f"{route.path}: a str field of {model} is not contracts.unicode.UnicodeText"
    assert len(bodies) >= 8


# --- 2b. one bad item never fails its batch -----------------------------------------------------------------------


class Upper:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    @batched(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def upper(self, items: list[str]) -> list[str]:
        self.calls.append(list(items))
        return [item.encode("utf-8").decode().upper() for item in items]  # raises on a lone surrogate


def test_one_bad_item_fails_only_its_own_caller():
    u = Upper()

    async def run():
        return await asyncio.gather(*(u.upper(t) for t in ["a", "b\ud800", "c", "d"]), return_exceptions=True)

    results = asyncio.run(run())
    assert results[0] == "A" and results[2] == "C" and results[3] == "D"
    assert isinstance(results[1], UnicodeEncodeError)
    assert u.calls[0] == ["a", "b\ud800", "c", "d"]  # one batch first, then each item alone


def test_isolation_also_covers_serve_batch_results():
    """Inside a replica ``serve.batch`` hands out the isolating function's results: failures travel as values."""
    from contracts.batching import ItemFailed, unwrap
    from deployments.serve_batch import isolating

    async def fn(_owner: object, items: list[int]) -> list[int]:
        if any(i < 0 for i in items):
            raise ValueError("negative")
        return [i * 10 for i in items]

    out = asyncio.run(isolating(fn)(None, [1, -1, 2]))
    assert out[0] == 10 and out[2] == 20 and isinstance(out[1], ItemFailed)
    with pytest.raises(ValueError):
        unwrap(out[1])


# --- 3. usage report dates -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "interval"),
    [
        ("9999-12-01T00:00:00Z", "9999-12-31T23:59:59Z", "day"),
        ("9999-01-01T00:00:00Z", "9999-12-31T00:00:00Z", "month"),
        ("9999-12-31T23:00:00Z", "9999-12-31T23:59:59Z", "minute"),
        ("9999-12-20T00:00:00Z", "9999-12-31T12:00:00Z", "week"),
    ],
)
def test_usage_report_refuses_dates_at_the_end_of_time(client, headers, start, end, interval):
    r = client.get(
        "/v1/transcribe/usage",
        params={"start_date_time": start, "end_date_time": end, "interval": interval},
        headers=headers,
    )
    assert r.status_code == 400, r.text
    assert "field 'end_date_time'" in r.json()["detail"] and "9999" in r.json()["detail"]


def test_usage_report_still_serves_the_last_supported_range(client, headers):
    r = client.get(
        "/v1/transcribe/usage",
        params={"start_date_time": "9999-12-30T00:00:00Z", "end_date_time": "9999-12-30T23:59:59Z", "interval": "hour"},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["usage"]) == 24


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("start_date_time", "2024-04-1١T00:00:00Z"),  # an Arabic-Indic digit (was read as the 11th)
        ("end_date_time", "2024-05-01T0٣:00:00Z"),  # ... (was read as 03:00)
        ("start_date_time", "２０２４-04-01T00:00:00Z"),  # full-width digits (were read as 2024)
        ("start_date_time", "٢٠٢٤-٠٤-٠١T00:00:00Z"),  # all Arabic-Indic
        ("end_date_time", "2024-05-0१T00:00:00Z"),  # a Devanagari digit
    ],
)
def test_usage_report_refuses_non_ascii_digits(client, headers, field, value):
    params = {"start_date_time": "2024-04-01T00:00:00Z", "end_date_time": "2024-05-02T00:00:00Z", field: value}
    r = client.get("/v1/transcribe/usage", params=params, headers=headers)
    assert r.status_code == 400, r.text
    assert f"field '{field}'" in r.json()["detail"]


# --- 4. NER keeps combining marks inside words ----------------------------------------------------------------------


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def test_heuristic_ner_keeps_combining_marks_inside_words():
    from engines.text.ner import HeuristicNER
    from engines.text.utils import word_spans

    text = "Ngibone uNelson Ma\u0300ndela eThekwini. Sikhulume noThabo Mbe\u0301ki e-Durban."
    assert "Ma\u0300ndela" in [w.text for w in word_spans(text)]
    assert "n\u0304kosi" in [w.text for w in word_spans("u n\u0304kosi")]  # a mark without a composed form
    found = HeuristicNER().recognise([text])[0]
    assert all(text[e.start : e.end] == e.word for e in found)
    words = [e.word for e in found]
    assert "Nelson Ma\u0300ndela" in words and "Thabo Mbe\u0301ki" in words, words


def test_english_ner_reads_nfd_text_as_its_composed_form():
    from engines.text.ner import SpacyNER

    ner = SpacyNER()
    for sent in (
        "Ramaphosa spoke to Emmanuel Macron and Ségolène Royal in Paris.",
        "President Thabo Mbeki met Angela Merkel in Zürich and Sao Tomé on Monday.",
    ):
        composed = [(e.entity, e.word) for e in ner.recognise([sent])[0]]
        text = _nfd(sent)
        found = ner.recognise([text])[0]
        assert all(text[e.start : e.end] == e.word for e in found)
        assert [(e.entity, unicodedata.normalize("NFC", e.word)) for e in found] == composed


def test_composed_offsets_map_back_to_whole_clusters():
    from engines.text.utils import nfc_with_offsets, original_span

    text = "Ma\u0300ndela n\u0304 e\u0301\u0323"
    composed, offsets = nfc_with_offsets(text)
    assert composed == unicodedata.normalize("NFC", text)
    assert len(offsets) == len(composed) + 1 and offsets[-1] == len(text)
    s, e = original_span(offsets, 0, composed.index(" "))
    assert text[s:e] == "Ma\u0300ndela"
    s, e = original_span(offsets, len(composed) - 1, len(composed))
    assert text[s:e] == "e\u0301\u0323"


# --- 5. the stream-auth GET documents what it answers ---------------------------------------------------------------


def test_stream_auth_openapi_says_empty_200(client, headers):
    op = create_app().openapi()["paths"]["/ws/stream-transcribe"]["get"]
    assert "content" not in op["responses"]["200"], op["responses"]["200"]
    r = client.get("/ws/stream-transcribe", headers=headers)
    assert r.status_code == 200 and r.content == b""

"""Text routes through the ingress over the TextAnalysis deployment (its embedder in-process, the default) in Serve's
local testing mode (no Ray cluster)."""

from __future__ import annotations

import numpy as np
import pytest

EXAMPLES = [
    {"intent": "balance", "example": "What is my account balance?"},
    {"intent": "balance", "example": "How much money do I have?"},
    {"intent": "greeting", "example": "Hello there"},
    {"intent": "greeting", "example": "Good morning"},
    {"intent": "outage", "example": "There is no electricity in my area"},
    {"intent": "outage", "example": "The power has been off all day"},
]


@pytest.fixture(scope="module")
def handles(settings):
    """One TextAnalysis for the module (loading the models is the slow part)."""
    from khuluma.app import build_local

    return build_local(settings, ["text"])


@pytest.fixture()
def client(settings, handles):
    """``client(text={"classify_enabled": False})``: a TestClient whose routes see changed settings."""
    from tests.conftest import client_for

    def make(**changes):
        return client_for(settings.updated(changes) if changes else settings, handles)

    return make


@pytest.fixture()
def headers(make_token):
    return {"X-CLIENT-TOKEN": make_token("text-tests")}


def test_entity_recognition_offsets(client, headers):
    text = "Hello, my name is Thandi Nkosi and I live in Johannesburg 😀."
    r = client().post("/api/v1/entity_recognition/process", json={"encoded_text": text}, headers=headers)
    assert r.status_code == 200, r.text
    ents = r.json()
    assert ents and all(text[e["start"] : e["end"]] == e["word"] for e in ents)
    assert {"entity": "location", "word": "Johannesburg"} in [{k: e[k] for k in ("entity", "word")} for e in ents]
    # isiZulu: only the types measured precise on real text (dates), never a guessed person
    zulu = "UMongameli uCyril Ramaphosa uvakashele eThekwini ngoMsombuluko ekuseni, ekhuluma nabantu abaningi."
    ents = client().post("/api/v1/entity_recognition/process", json={"encoded_text": zulu}, headers=headers).json()
    assert [(e["entity"], e["word"]) for e in ents] == [("date", "Msombuluko")]


def test_an_escaped_surrogate_pair_reaches_ner_as_one_character(client, headers):
    """JSON's escape of an emoji as a surrogate pair is valid Unicode: the edge lets it through (a lone surrogate is
    a 400: test_adversarial_text.py) and NER counts it as one character, so the offsets after it index the text."""
    body = '{"encoded_text": "\\ud83d\\ude00 Thandi Nkosi lives in Johannesburg."}'
    r = client().post(
        "/api/v1/entity_recognition/process",
        content=body,
        headers={**headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text
    text = "\U0001f600 Thandi Nkosi lives in Johannesburg."
    start = text.index("Johannesburg")
    assert {"entity": "location", "word": "Johannesburg", "start": start, "end": start + 12} in [
        {k: e[k] for k in ("entity", "word", "start", "end")} for e in r.json()
    ]


def test_entity_explanation_says_how_each_sentence_was_read(client, headers):
    """The playground's route: the standard route's entities, each with its recogniser, and per sentence the
    language it was read as (names discounted) with its confidence and the recognisers' languages."""
    text = "Bheki Cele met Thandeka Gqubule in Umlazi. Sihambe eThekwini ngoMsombuluko, sathenga ukudla."
    plain = client().post("/api/v1/entity_recognition/process", json={"encoded_text": text}, headers=headers)
    r = client().post("/api/v1/entity_recognition/explain", json={"encoded_text": text}, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [{k: e[k] for k in ("entity", "word", "start", "end")} for e in body["entities"]] == plain.json()
    assert all(e["recogniser"] for e in body["entities"])
    assert [s["text"] for s in body["sentences"]] == [
        "Bheki Cele met Thandeka Gqubule in Umlazi",
        " Sihambe eThekwini ngoMsombuluko, sathenga ukudla",
    ]
    english, zulu = body["sentences"]
    assert english["language"] != "zul" and "eng" in english["read_as"], english
    assert zulu["language"] in ("zul", "ssw", "xho") and zulu["confidence"] > 0.5 and zulu["candidates"], zulu
    people = {e["word"]: e["recogniser"] for e in body["entities"] if e["entity"] == "person"}
    assert set(people) == {"Bheki Cele", "Thandeka Gqubule"}, body["entities"]
    # the standard route's wire shape is untouched: exactly the four fields
    assert all(set(e) == {"entity", "word", "start", "end"} for e in plain.json())
    r = client().post("/api/v1/entity_recognition/explain", json={"encoded_text": " "}, headers=headers)
    assert r.status_code == 400 and "encoded_text" in r.json()["detail"]


def test_sentiment_splits_sentences_keeping_leading_space(client, headers):
    r = client().post(
        "/api/v1/sentiment_analysis/process",
        json={"encoded_text": "I am so happy today. I am very sad and angry! The bus leaves at nine"},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"Id", "Sentiments"}
    assert [s["text"] for s in body["Sentiments"]] == [
        "I am so happy today",
        " I am very sad and angry",
        " The bus leaves at nine",
    ]
    labels = [s["sentiment"][0]["label"] for s in body["Sentiments"]]
    assert labels == ["positive", "negative", "neutral"]
    assert all(0.33 < s["sentiment"][0]["score"] <= 1 for s in body["Sentiments"])


@pytest.mark.parametrize("path", ["/api/v1/entity_recognition/process", "/api/v1/sentiment_analysis/process"])
def test_empty_and_too_long_text_answer_400(client, headers, path):
    c = client()
    r = c.post(path, json={"encoded_text": "   "}, headers=headers)
    assert r.status_code == 400 and "encoded_text" in r.json()["detail"]
    r = c.post(path, json={"encoded_text": "word " * 2001}, headers=headers)
    assert r.status_code == 400 and "2000" in r.json()["detail"]


def test_classify_probabilities_in_input_order(client, headers):
    inputs = ["Hi, good morning to you", "Please show my balance", "My lights are out, no power here"]
    r = client().post("/api/v1/classify", json={"examples": EXAMPLES, "inputs": inputs}, headers=headers)
    assert r.status_code == 200, r.text
    results = r.json()
    assert len(results) == 3
    for res, want in zip(results, ["greeting", "balance", "outage"]):
        probs = res["probabilities"]
        assert [p["intent"] for p in probs] == ["balance", "greeting", "outage"]
        assert abs(sum(p["score"] for p in probs) - 1) < 1e-6
        assert max(probs, key=lambda p: p["score"])["intent"] == want


def test_classify_validation_and_maintenance_switch(client, headers):
    c = client()
    one = EXAMPLES[:-1]  # "outage" has a single example
    r = c.post("/api/v1/classify", json={"examples": one, "inputs": ["hi"]}, headers=headers)
    assert r.status_code == 400 and "outage" in r.json()["detail"]
    r = c.post("/api/v1/classify", json={"examples": EXAMPLES, "inputs": []}, headers=headers)
    assert r.status_code == 400 and "inputs" in r.json()["detail"]
    r = client(text={"classify_enabled": False}).post(
        "/api/v1/classify", json={"examples": EXAMPLES, "inputs": ["hi"]}, headers=headers
    )
    assert r.status_code == 503 and "maintenance" in r.json()["detail"]


def test_language_detect_route(client, headers):
    text = "Thobela, ke kgopela thušo ka kopo ya ka ya mošomo ka kgwedi ye."
    r = client().post("/api/v1/language/detect", json={"text": text, "spans": True}, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["language"] == "nso" and body["nllb_code"] == "nso_Latn"
    assert body["spans"] and all(text[s["start"] : s["end"]] == s["text"] for s in body["spans"])
    r = client().post("/api/v1/language/detect", json={"text": ""}, headers=headers)
    assert r.status_code == 400


def test_models_listing_is_honest(client, headers):
    r = client().get("/api/v1/models", headers=headers)
    assert r.status_code == 200, r.text
    caps = {c["capability"]: c for c in r.json()["capabilities"]}
    ner = caps["entity_recognition"]
    assert ner["installed"]
    langs = {lang["code"]: lang for lang in ner["languages"]}
    assert "spaCy" in langs["eng"]["model"]
    assert langs["zul"]["model"] == "heuristic" and "heuristic" in langs["zul"]["note"]
    assert "dates" in langs["zul"]["note"] and langs["zul"]["quality"]["value"] >= 0.8
    # a language whose heuristic is not precise enough on real text returns nothing, and says so with the figure
    assert not langs["xho"]["supported"] and langs["xho"]["quality"]["measured"] and langs["xho"]["quality"]["poor"]
    assert not langs["sot"]["supported"] and not langs["sot"]["quality"]["measured"]  # no real annotated text
    lid = {lang["code"] for lang in caps["language_identification"]["languages"]}
    assert lid == {"nso", "afr", "sot", "ssw", "tso", "tsn", "xho", "zul", "eng", "swh", "sna", "fra"}
    # every language of every text capability is measured (figure and source) or says it is not: no bare tick
    for capability in ("entity_recognition", "sentiment_analysis", "intent_classification", "language_identification"):
        for lang in caps[capability]["languages"]:
            quality = lang["quality"]
            assert quality is not None, (capability, lang)
            if not quality["published"]:  # a publisher's figure is marked as such, never as measured here
                assert quality["measured"] == (quality["value"] is not None and quality["data"] is not None)
    # language ID: the short-sentence figure (under 80 characters, names included) beside the long one
    lid_quality = {lang["code"]: lang["quality"] for lang in caps["language_identification"]["languages"]}
    for code in ("eng", "zul", "xho", "tsn", "sna", "swh"):
        assert lid_quality[code]["short_value"] is not None and "80" in lid_quality[code]["short_data"], code
    assert lid_quality["eng"]["short_value"] < lid_quality["eng"]["value"]
    assert lid_quality["nso"]["short_value"] is None and "short" in lid_quality["nso"]["note"]
    # English NER is measured on real South African news text
    assert "South African articles" in langs["eng"]["quality"]["data"]
    sentiment = {lang["code"]: lang["quality"] for lang in caps["sentiment_analysis"]["languages"]}
    assert {c for c, q in sentiment.items() if q["measured"]} == {"eng", "afr", "sot", "zul"}


def test_text_analysis_without_an_embeddings_handle_runs_the_embedder_itself(settings):
    """``embeddings.placement`` local (the default with the offline model): TextAnalysis embeds in its own process
    and lists the embedder in its description, since no Embeddings deployment runs to do so."""
    import asyncio

    from deployments.text import TextAnalysis

    analysis = TextAnalysis(settings.for_replica(("text", "embeddings")))
    assert analysis.local_embeddings is not None
    vectors = asyncio.run(analysis._embed(["Sawubona", "Good morning"]))
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    described = {c.capability: c for c in asyncio.run(analysis.describe())}
    assert described["embeddings"].installed and "e5" in (described["embeddings"].model or "")


def test_the_embedder_placement(settings):
    """auto: in-process for the offline model, a deployment for a configured one; either can be asked for."""
    assert settings.embeddings.local
    assert not settings.updated({"embeddings": {"model": "/models/e5-large"}}).embeddings.local
    assert not settings.updated({"embeddings": {"placement": "deployment"}}).embeddings.local
    assert settings.updated({"embeddings": {"model": "/models/e5-large", "placement": "local"}}).embeddings.local


def test_the_app_builder_deploys_what_a_deployment_needs(settings):
    """With the embedder as a deployment, asking for text alone also deploys Embeddings (TextAnalysis cannot work
    without it); in-process, it is not deployed at all. Optional partners (Transcription's translation) are wired
    only when asked for. Both placements give the same vectors."""
    import asyncio

    from deployments.embeddings import LocalEmbeddings
    from khuluma.app import _with_needs, build_local, default_capabilities, deployment_names

    apart = settings.updated({"embeddings": {"placement": "deployment"}})
    assert _with_needs({"text"}, apart) == {"text", "embeddings"}
    assert _with_needs({"search", "jobs"}, apart) == {"search", "embeddings", "jobs"}
    assert _with_needs({"text"}, settings) == {"text"}
    assert _with_needs({"search", "jobs"}, settings) == {"search", "jobs"}
    assert _with_needs({"speech"}, settings) == {"speech"}
    assert "embeddings" in default_capabilities(apart) and "Embeddings" in deployment_names(apart)
    assert "embeddings" not in default_capabilities(settings) and "Embeddings" not in deployment_names(settings)
    handles = build_local(apart, ["text"])
    assert set(handles) == {"text", "embeddings"}
    texts = ["Ugesi awukho endaweni yami", "Where is my parcel?"]
    remote = handles["embeddings"].embed.remote(texts, "query").result()
    local = asyncio.run(LocalEmbeddings(settings).embed(texts, "query"))
    assert np.allclose(remote, local, atol=1e-6)


def test_text_analysis_answers_a_group_as_it_answers_each_request_alone(settings):
    """The ingress sends TextAnalysis groups of requests (``*_many``): every member gets what a call of its own
    gets, classify requests with different example sets included, and an item that fails fails alone."""
    import asyncio

    from contracts.batching import ItemFailed
    from contracts.text import ClassifyRequest, IntentExample, TextInput
    from deployments.text import TextAnalysis

    analysis = TextAnalysis(settings.for_replica(("text", "embeddings")))
    texts = [
        "Thandi Nkosi moved to Durban in 2001 with her family.",
        "USipho Dlamini usebenza eGoli.",
        "The food was awful!",
    ]
    requests = [TextInput(text=t) for t in texts]

    def examples(pairs: dict[str, list[str]]) -> list[IntentExample]:
        return [IntentExample(intent=i, example=e) for i, es in pairs.items() for e in es]

    banking = examples({"balance": ["What is my balance?", "Ngimalini?"], "hello": ["Sawubona", "Hello there"]})
    power = examples({"outage": ["The power is off", "Awukho ugesi"], "hours": ["When do you open?", "Open now?"]})
    classify = [
        ClassifyRequest(examples=banking, inputs=["Show my balance", "Hi!"]),
        ClassifyRequest(examples=power, inputs=["Ugesi ucimile", "Are you open on Sunday?", "No lights here"]),
    ]

    async def run():
        return (
            await analysis.entities_many(requests),
            [await analysis.entities(r) for r in requests],
            await analysis.sentiment_many(requests),
            [await analysis.sentiment(r) for r in requests],
            await analysis.classify_many(classify),
            [await analysis.classify(r) for r in classify],
        )

    ents_many, ents_one, sent_many, sent_one, cls_many, cls_one = asyncio.run(run())
    assert ents_many == ents_one and any(e.word == "Durban" for e in ents_many[0])
    assert [[s.text for s in r] for r in sent_many] == [[s.text for s in r] for r in sent_one]
    for group, alone in zip(sent_many, sent_one):
        for s, t in zip(group, alone):
            assert s.sentiment[0].label == t.sentiment[0].label
            assert abs(s.sentiment[0].score - t.sentiment[0].score) < 1e-3
    assert [len(r) for r in cls_many] == [2, 3]
    for group, alone in zip(cls_many, cls_one):
        for a, b in zip(group, alone):
            assert [p.intent for p in a.probabilities] == [p.intent for p in b.probabilities]
            assert np.allclose([p.score for p in a.probabilities], [p.score for p in b.probabilities], atol=1e-3)

    # one request the classifier cannot answer (an input missing from its vectors) fails alone
    real = analysis._classify_one

    def picky(request, vectors):
        if "Hi!" in request.inputs:
            raise ValueError("cannot classify this one")
        return real(request, vectors)

    analysis._classify_one = picky  # type: ignore[method-assign]
    mixed = asyncio.run(analysis.classify_many(classify))
    assert isinstance(mixed[0], ItemFailed) and "cannot classify" in str(mixed[0].error)
    assert [len(r) for r in mixed[1:]] == [3]


def test_text_analysis_runs_each_group_as_its_own_pass_one_at_a_time(settings):
    """Each request is batched once, by the ingress: a group that reaches TextAnalysis while a pass of its kind runs
    (two ingress replicas, or a second group from one) waits and then runs whole, as its own pass, never merged
    with the others nor split; and each group gets exactly its own answers."""
    import asyncio
    import threading

    from contracts.text import TextInput
    from deployments.text import TextAnalysis

    analysis = TextAnalysis(settings.for_replica(("text", "embeddings")))
    texts = [f"Thandi Nkosi moved to Durban in {2000 + i}." for i in range(6)] + ["USipho Dlamini usebenza eGoli."]
    alone = asyncio.run(analysis.entities_many([TextInput(text=t) for t in texts]))
    passes: list[int] = []
    running = 0
    most_at_once = 0
    started, release = threading.Event(), threading.Event()
    real = analysis._entities_sync

    def recorded(batch: list[str]):
        nonlocal running, most_at_once
        running += 1
        most_at_once = max(most_at_once, running)
        passes.append(len(batch))
        if len(passes) == 1:
            started.set()
            release.wait(5)  # the first pass runs until every later group has arrived
        try:
            return real(batch)
        finally:
            running -= 1

    analysis._entities_sync = recorded  # type: ignore[method-assign]

    async def run():
        first = asyncio.ensure_future(analysis.entities_many([TextInput(text=texts[0])]))
        assert await asyncio.to_thread(started.wait, 5)
        groups = [texts[1:3], texts[3:4], texts[4:]]
        later = [asyncio.ensure_future(analysis.entities_many([TextInput(text=t) for t in g])) for g in groups]
        await asyncio.sleep(0.05)
        release.set()
        return [await first] + [await g for g in later]

    answers = asyncio.run(run())
    assert passes == [1, 2, 1, 3] and most_at_once == 1
    assert [a for group in answers for a in group] == alone


def test_text_analysis_embeds_a_groups_sentences_in_one_model_call(settings):
    """A group is batched once, by the ingress: its sentences go to the embedder as one model call, not through the
    embedder's micro-batcher, which would batch them a second time (and send the first one alone)."""
    import asyncio

    from contracts.text import TextInput
    from deployments.text import TextAnalysis

    analysis = TextAnalysis(settings.for_replica(("text", "embeddings")))
    local = analysis.local_embeddings
    assert local is not None
    direct: list[int] = []
    micro: list[int] = []
    real_texts, real_items = local._embed_texts, local._embed_items

    def texts_call(texts, kind):
        direct.append(len(texts))
        return real_texts(texts, kind)

    def items_call(items):
        micro.append(len(items))
        return real_items(items)

    local._embed_texts = texts_call  # type: ignore[method-assign]
    local._embed_items = items_call  # type: ignore[method-assign]
    group = [TextInput(text="The food was great. The staff were rude!"), TextInput(text="Ngijabule kakhulu.")]
    answers = asyncio.run(analysis.sentiment_many(group))
    assert [len(a) for a in answers] == [2, 1]
    assert direct == [3] and micro == []


def test_ner_in_the_ingress_answers_as_text_analysis_does(settings, handles, headers):
    """``text.ner_in_ingress``: the typed handle runs the offline recognisers in the ingress's process, loaded on the
    first NER request, and answers exactly what the TextAnalysis deployment answers; a configured NER model keeps
    NER on the deployment."""
    from serve_app.in_process import serve_in_process
    from tests.conftest import client_for

    deployment = client_for(settings, handles)  # off by default
    serve_in_process(deployment.context.settings, deployment.context.clients)
    assert not deployment.context.clients.text.recognises_in_process
    in_ingress = settings.updated({"text": {"ner_in_ingress": True}})
    here = client_for(in_ingress, handles)
    serve_in_process(in_ingress, here.context.clients)
    text_client = here.context.clients.text
    assert text_client.recognises_in_process and text_client._entities_engine is None  # nothing loaded at start
    texts = [
        "President Cyril Ramaphosa visited Durban on Monday with officials from Eskom.",
        "UMongameli uCyril Ramaphosa uvakashele eThekwini ngoMsombuluko.",
        "Thandi Nkosi works for Standard Bank in Johannesburg. Sipho lives in Soweto!",
    ]
    for text in texts:
        body = {"encoded_text": text}
        a = deployment.post("/api/v1/entity_recognition/process", json=body, headers=headers)
        b = here.post("/api/v1/entity_recognition/process", json=body, headers=headers)
        assert a.status_code == b.status_code == 200, (a.text, b.text)
        assert b.json() == a.json()
    assert text_client._entities_engine is not None
    with_model = client_for(in_ingress.updated({"text": {"ner_model": "masakhaner-afroxlmr-large"}}), handles)
    serve_in_process(with_model.context.settings, with_model.context.clients)
    assert not with_model.context.clients.text.recognises_in_process


def test_usage_totals_equal_the_requests_answered_after_a_clean_stop(settings, handles, make_token):
    """Usage rows are written behind the answers (a period longer than the test here, so none is written before the
    stop); a clean stop (the replica's drain, then its shutdown) writes every one: the totals equal the requests
    answered."""
    import asyncio

    from sqlalchemy import func, select

    from persistence.models import UsageRecord
    from serve_app.in_process import serve_in_process
    from serve_app.ingress import drain_replica
    from tests.conftest import client_for

    client = client_for(settings.updated({"usage_flush_seconds": 3600}), handles)
    serve_in_process(client.context.settings, client.context.clients)
    headers = {"X-CLIENT-TOKEN": make_token("metered-stop")}
    answered = 0
    for i in range(12):
        route = "entity_recognition/process" if i % 2 else "sentiment_analysis/process"
        r = client.post(
            f"/api/v1/{route}", json={"encoded_text": f"Thandi lives in Durban. Text {i}."}, headers=headers
        )
        answered += r.status_code == 200
    assert answered == 12
    context = client.context
    customer = context.tokens.cached(headers["X-CLIENT-TOKEN"]).customer_id

    def rows() -> int:
        with context.db.session() as s:
            return s.scalar(select(func.count()).where(UsageRecord.customer_id == customer))

    assert context.usage.pending >= 12 and rows() < 12  # written behind the answers, not yet
    assert asyncio.run(drain_replica(context, 1.0))  # what a graceful stop runs in each ingress replica
    context.usage.close()  # and the replica's shutdown (Ingress.__del__)
    assert rows() == answered

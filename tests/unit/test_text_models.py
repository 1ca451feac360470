"""The African models an operator adds (``khuluma models pull``): the catalogue's short names and licences, and tiny
randomly initialised models of the real architectures (XLM-R token and sequence classifiers, MADLAD-400's T5)
through the loaders, the per-language routing and the listing of the HTTP service."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from engines.models.catalogue import KNOWN_MODELS
from engines.models.install import add_local
from engines.models.registry import ModelEntry, ModelRegistry
from tests.tools import khuluma_models

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-DATE", "I-DATE"]
ZULU = "Izolo uSipho Ndlovu uvakashele eThekwini wahlangana nabantu abaningi emhlanganweni omkhulu."
XHOSA = "Umongameli uthethe nabantu abaninzi phaya eKapa ngolwesiBini emva kwemini kwaye bonwabile kakhulu."
TSONGA = "Munhu un'wana na un'wana u velekiwe a ntshunxekile naswona a ringana hi xindzhuti na timfanelo."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    """Tiny models of the catalogue's architectures, registered in the session data dir as `khuluma models pull`
    would register them (their source is the catalogue's Hugging Face id, so the catalogue describes them)."""
    from contracts.settings import Settings
    from scripts.bench._tiny_models import build_tiny_xlmr

    root = tmp_path_factory.mktemp("tiny-text-models")
    ner = build_tiny_xlmr(root / "ner", "token", NER_LABELS, forced="B-PER")
    sentiment = build_tiny_xlmr(root / "sentiment", "sequence", ["positive", "neutral", "negative"], "negative")
    return {"ner": ner, "sentiment": sentiment, "settings": Settings}


def _register(settings, tiny) -> None:
    registry = ModelRegistry(settings.data_dir)
    registry.register(
        ModelEntry(
            "masakhaner-afroxlmr-large",
            "ner",
            str(tiny["ner"]),
            "transformers",
            KNOWN_MODELS["masakhaner-afroxlmr-large"].hf_id,
        )
    )
    registry.register(
        ModelEntry(
            "afrisenti-afroxlmr-large",
            "sentiment",
            str(tiny["sentiment"]),
            "transformers",
            KNOWN_MODELS["afrisenti-afroxlmr-large"].hf_id,
        )
    )


def test_the_catalogue_names_african_models_with_licences_and_languages(tmp_path: Path):
    ner, sentiment, madlad = (
        KNOWN_MODELS[n] for n in ("masakhaner-afroxlmr-large", "afrisenti-afroxlmr-large", "madlad400-3b-mt")
    )
    assert (ner.capability, ner.licence, ner.backend) == ("ner", "AFL-3.0", "transformers")
    assert {"zul", "xho", "tsn"} <= set(ner.languages) and "nso" not in ner.languages
    assert dict(ner.published_figures) == {"xho": 0.900, "tsn": 0.903, "sna": 0.965}
    assert (sentiment.capability, sentiment.licence, sentiment.languages) == ("sentiment", "Apache-2.0", ("tso", "swh"))
    assert (madlad.capability, madlad.licence, madlad.non_commercial) == ("translation", "Apache-2.0", False)
    listing = khuluma_models(tmp_path, "list")
    assert listing.returncode == 0, listing.stderr
    out = " ".join(listing.stdout.split())
    for name in ("masakhaner-afroxlmr-large", "afrisenti-afroxlmr-large", "madlad400-3b-mt", "AFL-3.0"):
        assert name in out, name


def test_pull_shows_the_licence_and_published_figures_before_any_download(tmp_path: Path):
    pulled = khuluma_models(tmp_path, "pull", "masakhaner-afroxlmr-large", HF_HUB_OFFLINE="1")
    out = " ".join(pulled.stdout.split())
    assert pulled.returncode == 1  # offline: nothing to download from
    licence = out.index("licence AFL-3.0 (commercial use allowed)")
    assert "published" in out.lower() and "xho 0.900" in out and "Routed to it" in out
    assert licence < out.index("Could not download masakhane/afroxlmr-large-ner-masakhaner-1.0_2.0")


def test_ner_and_sentiment_models_are_routed_per_language_through_the_service(settings, tiny, make_token):
    from khuluma.app import build_local
    from tests.conftest import client_for

    _register(settings, tiny)
    configured = settings.updated(
        {"text": {"ner_model": "masakhaner-afroxlmr-large", "sentiment_model": "afrisenti-afroxlmr-large"}}
    )
    client = client_for(configured, build_local(configured, ["text"]))
    headers = {"X-CLIENT-TOKEN": make_token("text-models")}

    # NER: isiZulu goes to the model (every word a person, as the tiny model is built); English to spaCy
    r = client.post(
        "/api/v1/entity_recognition/explain",
        json={"encoded_text": f"{ZULU} Thandi Nkosi lives in Durban."},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    zulu_end = body["sentences"][0]["end"]
    in_zulu = [e for e in body["entities"] if e["end"] <= zulu_end]
    assert in_zulu and all(e["entity"] == "person" and str(tiny["ner"]) in e["recogniser"] for e in in_zulu)
    assert {"zul"} == set(body["sentences"][0]["read_as"])
    english = [e for e in body["entities"] if e["start"] > zulu_end]
    assert ("location", "Durban") in {(e["entity"], e["word"]) for e in english}
    assert all(str(tiny["ner"]) not in e["recogniser"] for e in english)

    # sentiment: Xitsonga goes to the model (always negative, as built); English keeps the offline classifier
    r = client.post(
        "/api/v1/sentiment_analysis/process",
        json={"encoded_text": TSONGA},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert [s["sentiment"][0]["label"] for s in r.json()["Sentiments"]] == ["negative"]
    assert r.json()["Sentiments"][0]["sentiment"][0]["score"] > 0.99
    r = client.post(
        "/api/v1/sentiment_analysis/process", json={"encoded_text": "I love this, it is wonderful!"}, headers=headers
    )
    assert r.json()["Sentiments"][0]["sentiment"][0]["label"] == "positive"

    # the listing: routed languages name the model, its licence and its publisher's figure, marked as published
    caps = {c["capability"]: c for c in client.get("/api/v1/models").json()["capabilities"]}
    ner = {lang["code"]: lang for lang in caps["entity_recognition"]["languages"]}
    assert ner["xho"]["model"] == "masakhaner-afroxlmr-large" and "AFL-3.0" in ner["xho"]["note"]
    assert ner["xho"]["quality"]["published"] and ner["xho"]["quality"]["value"] == 0.9
    assert not ner["xho"]["quality"]["measured"]
    assert ner["nso"]["model"] != "masakhaner-afroxlmr-large"  # not trained on it: the offline recogniser stays
    sentiment = {lang["code"]: lang for lang in caps["sentiment_analysis"]["languages"]}
    assert sentiment["tso"]["model"] == "afrisenti-afroxlmr-large" and "Apache-2.0" in sentiment["tso"]["note"]
    assert sentiment["zul"]["model"] != "afrisenti-afroxlmr-large"


def test_madlad_translation_through_ctranslate2_and_the_service(local_app, make_token, tmp_path: Path):
    from engines.translation.load import load_translator
    from engines.translation.madlad import MadladTranslator
    from scripts.bench._tiny_models import build_tiny_madlad

    hf = build_tiny_madlad(tmp_path / "hf")
    entry = add_local(ModelRegistry(tmp_path / "data"), hf, name="tiny-madlad", capability="translation")
    assert entry.backend == "ctranslate2" and (Path(entry.path) / "spiece.model").is_file()
    engine = load_translator(entry.path, "ctranslate2", entry.name)
    assert isinstance(engine, MadladTranslator) and {"zul_Latn", "xho_Latn", "sot_Latn"} <= engine.languages
    out = engine.translate_batch([("Hello world. Good morning.", "eng_Latn", "zul_Latn")])[0]
    assert len(out.segments) == 2 and all(s.tokens[0] == "<2zu>" for s in out.segments)  # the target token leads

    client = local_app(["translation"], translation={"model": entry.path, "max_length": 12})
    headers = {"X-CLIENT-TOKEN": make_token("madlad")}
    r = client.post(
        "/api/v1/translate/process",
        json={"input_text": "Hello world.", "source_lang": "eng_Latn", "target_lang": "zul_Latn"},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["translation"][0]["translated_text"], str)
    caps = {c["capability"]: c for c in client.get("/api/v1/models").json()["capabilities"]}
    assert caps["translation"]["installed"] and "MADLAD-400" in caps["translation"]["note"]

"""Contract test: the official vulavula SDK (own venv, pydantic v1) against the live Ray Serve application."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.tools import require_tool

pytestmark = [pytest.mark.integration, pytest.mark.contract]
ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"


@pytest.fixture(scope="module")
def sdk_results(serve_url, make_token, tmp_path_factory):
    if not SDK_PYTHON.exists():
        pytest.fail("The SDK venv is missing: run ./scripts/setup.sh --test")
    require_tool("espeak-ng")  # the SDK's transcription call sends generated speech
    work = tmp_path_factory.mktemp("sdk")
    audio = work / "hello.wav"
    subprocess.run(
        ["espeak-ng", "-v", "en", "-w", str(audio), "Hello, this is a test of the transcription."], check=True
    )
    doc = work / "harbour.txt"
    doc.write_text(
        "Durban has the busiest harbour in Africa. Cape Town is known for Table Mountain.\n\n"
        "Johannesburg is the largest city in South Africa."
    )
    token = make_token("sdk-customer")
    proc = subprocess.run(
        [
            str(SDK_PYTHON),
            str(ROOT / "tests" / "contract" / "sdk_script.py"),
            f"{serve_url}/api/v1/",
            token,
            str(audio),
            str(doc),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "name",
    [
        "get_sentiments",
        "get_entities",
        "classify",
        "create_knowledgebase",
        "create_documents",
        "get_documents",
        "get_knowledgebases",
        "query",
        "query_null_language",
        "delete_document",
        "delete_knowledgebase",
        "upload_file",
        "transcribe_process",
        "get_transcribed_text",
    ],
)
def test_sdk_call_succeeds(sdk_results, name):
    assert sdk_results[name]["ok"], sdk_results[name]


def test_sdk_shapes(sdk_results):
    sentiments = sdk_results["get_sentiments"]["result"]
    assert [s["text"] for s in sentiments["Sentiments"]][1].startswith(" ")
    entities = sdk_results["get_entities"]["result"]
    assert all({"entity", "word", "start", "end"} <= set(e) for e in entities)
    # not only the shape: an English sentence with South African names keeps its entities (issue #36)
    found = {(e["entity"], e["word"]) for e in entities}
    assert {("person", "Cyril Ramaphosa"), ("location", "Durban")} <= found, entities
    classes = sdk_results["classify"]["result"]
    assert len(classes) == 2 and classes[0]["probabilities"]
    kbs = sdk_results["get_knowledgebases"]["result"]
    assert any(kb["knowledgebase_name"] == "contract-kb" and kb["documents"] for kb in kbs)
    hits = sdk_results["query"]["result"]["search_result"]
    assert hits and "harbour" in hits[0]["text"]
    text = sdk_results["get_transcribed_text"]["result"]
    assert "test" in json.dumps(text).lower()


def test_sdk_sees_an_honest_translation_error(sdk_results):
    # No translation model ships offline: the SDK surfaces our 503 and its install instructions.
    result = sdk_results["translate"]
    assert not result["ok"] and "503" in result["error"] and "khuluma models" in result["error"]

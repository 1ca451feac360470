"""Runs INSIDE .venv-sdk (official vulavula SDK, pydantic v1). Exercises every SDK call against a live server.

usage: python sdk_script.py BASE_URL TOKEN AUDIO_WAV DOC_TXT
Prints one JSON object: {call_name: {"ok": bool, "result": ..., "error": str}}.
"""

import json
import sys
import time

from vulavula import VulavulaClient

base_url, token, audio, doc = sys.argv[1:5]
client = VulavulaClient(token, base_url=base_url)  # base_url may end with '/', giving '//' paths
out = {}


def call(name, fn, *args, **kwargs):
    try:
        out[name] = {"ok": True, "result": fn(*args, **kwargs)}
    except Exception as exc:  # noqa: BLE001 - the SDK raises VulavulaError on any non-200/201
        out[name] = {"ok": False, "error": str(exc)}
    return out[name].get("result")


call("get_sentiments", client.get_sentiments, {"encoded_text": "I love this phone. The battery is terrible!"})
call("get_entities", client.get_entities, {"encoded_text": "Cyril Ramaphosa visited Durban on Monday."})
call(
    "classify",
    client.classify,
    {
        "examples": [
            {"intent": "greeting", "example": "Hello there"},
            {"intent": "greeting", "example": "Good morning"},
            {"intent": "goodbye", "example": "See you later"},
            {"intent": "goodbye", "example": "Bye for now"},
        ],
        "inputs": ["Hi, how are you?", "Goodbye my friend"],
    },
)
call("translate", client.translate, {"input_text": "Hello", "source_lang": "eng_Latn", "target_lang": "zul_Latn"})
kb = call("create_knowledgebase", client.create_knowledgebase, "contract-kb")  # the SDK wraps the name
if kb:
    doc_info = call("create_documents", client.create_documents, doc, kb["id"])
    call("get_documents", client.get_documents, kb["id"])
    call("get_knowledgebases", client.get_knowledgebases)
    call("query", client.query, kb["id"], "Which city hosts the harbour?", "en_ZA")
    call("query_null_language", client.query, kb["id"], "harbour", None)
    if isinstance(doc_info, dict) and "id" in doc_info:
        call("delete_document", client.delete_document, doc_info["id"])
    call("delete_knowledgebase", client.delete_knowledgebase, kb["id"])
up = call("upload_file", client.upload_file, audio)
if up:
    call("transcribe_process", client.transcribe_process, up["upload_id"])
    deadline = time.time() + 240
    while time.time() < deadline:
        res = call("get_transcribed_text", client.get_transcribed_text, up["upload_id"])
        if not (isinstance(res, dict) and res.get("message") == "Item has not been processed."):
            break
        time.sleep(1)
print(json.dumps(out, default=str))

"""Replicas import only what they use: spaCy's English pipeline loads without torch (about 240 MB per process),
and torch still imports normally afterwards for a transformers model in the same process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # installed with the transformers extra (what setup.sh installs)

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
sys.path.insert(0, {root!r})
if {torch_first}:
    import torch
from engines.text.ner import SpacyNER
ner = SpacyNER()
entities = [[(e.entity, e.word, e.start, e.end) for e in found] for found in ner.recognise({texts!r})]
torch_after_spacy = "torch" in sys.modules
import torch  # a transformers model loaded later in the same replica
answer = {{"entities": entities, "torch_after_spacy": torch_after_spacy, "tensor": float(torch.ones(3).sum())}}
print(json.dumps(answer))
"""

TEXTS = ["Thandi Nkosi flew from Johannesburg to Cape Town on Friday.", "Eskom met Vodacom in Pretoria in May."]


def probe(torch_first: bool) -> dict:
    code = PROBE.format(root=str(ROOT), torch_first=torch_first, texts=TEXTS)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_spacy_ner_loads_without_torch_and_finds_the_same_entities() -> None:
    lean, with_torch = probe(torch_first=False), probe(torch_first=True)
    assert lean["torch_after_spacy"] is False  # spaCy and its pipeline came up without torch
    assert lean["tensor"] == 3.0  # and torch imports normally after it
    assert lean["entities"] == with_torch["entities"]
    assert any(lean["entities"][0]), lean  # the pipeline really ran

"""docs/architecture.md states how many project files each traced route runs: those counts must be the code's.

``scripts/trace_routes.py`` traces the routes (in a process of its own: its call tracer would slow every test
after it); this test reads the counts the doc states and compares them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
HEADINGS = {
    "ner": "NER",
    "knowledge-base query": "Knowledge-base query",
    "sync transcription": "Sync transcription",
    "live session": "Live session",
}


def test_the_traced_counts_are_the_codes() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "trace_routes.py"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    traced = json.loads(run.stdout)
    doc = DOC.read_text()
    shared = re.search(r"\*\*The edge every HTTP route shares: (\d+) files\.\*\*", doc)
    assert shared, "docs/architecture.md no longer states the shared edge's count"
    assert int(shared.group(1)) == len(traced["shared"]), traced["shared"]
    for name, heading in HEADINGS.items():
        stated = re.search(rf"\*\*{heading}\*\*, `[^`]+`: (\d+) files, (\d+) of its own", doc)
        assert stated, f"docs/architecture.md no longer traces {name}"
        route = traced["routes"][name]
        assert (int(stated.group(1)), int(stated.group(2))) == (route["total"], len(route["own"])), (name, route)
        for file in route["own"]:  # every file of its own is named in the doc
            assert file in doc, f"{file} ({name}) is not in docs/architecture.md"

"""Live sessions on real recordings, without a language: what a client of the Live API would see.

Each recording is streamed through the service's own stepping (``serve_app.services.live.steps.live_step`` and the
Live API's append-only deltas, ``serve_app.services.live.deltas``) in 100 ms frames, in this process (no Ray,
no WebSocket: the engine decodes in a worker thread as the Speech deployment does). No language is given, as
the vendor's browser example and its Python one with ``SOURCE_LANGUAGE`` unset send none. Folders as
``scripts/eval_real.py`` reads them (``<iso639-3>-<source>/<stem>.wav`` + ``<stem>.txt``)::

    python scripts/eval_live.py DIR... [--limit N] [--switch ENG_DIR ZUL_DIR] [--json OUT]

Per folder: sessions refused (an ``error`` event, the session ends), sessions that sent text, the words sent as
deltas (in a language without a speech model every one of them is invented), the speech withheld, the
languages the completed segments carry and, for served languages, the word error of the streamed transcript.
``--switch``: calls made of a recording of each folder in turn (English, then isiZulu, then English again, with
0.8 s pauses), like a call that code-switches: the English words transcribed and the isiZulu ones withheld.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.eval_real import clean_reference  # noqa: E402
from scripts.eval_wer import word_errors  # noqa: E402

FRAME = 3200  # 100 ms of 16 kHz PCM16


@dataclass
class Session:
    """What one live session showed its client."""

    name: str
    seconds: float
    refused: str = ""  # the error that ended it
    deltas: str = ""
    completed: list[tuple[str, str]] = field(default_factory=list)  # (language, text)
    withheld_seconds: float = 0.0
    withheld_spans: list[tuple[float, float]] = field(default_factory=list)
    withheld_languages: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: int = 0  # word errors of the deltas against the reference (served languages)
    words: int = 0


class Direct:
    """A SpeechClient that decodes in this process."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    async def live_step(self, request: Any) -> Any:
        return await asyncio.to_thread(self.pipeline.live_step, request)


async def live(client: Direct, pcm: bytes, name: str) -> Session:
    from contracts.errors import DomainError
    from serve_app.services.live.deltas import AppendOnlyTranscript
    from serve_app.services.live.state import StreamState
    from serve_app.services.live.steps import live_step

    state = StreamState(None)
    transcript = AppendOnlyTranscript()
    out = Session(name, len(pcm) / 32_000)

    def show(outcome: Any, final: bool) -> None:
        if not final:
            out.deltas += transcript.agree(outcome.hypothesis, outcome.shown)
        for piece in transcript.commit(outcome.committed, final=final):
            out.deltas += piece.delta
            out.completed.append((piece.segment.language_code or state.lang_code or "?", piece.text))
        for w in outcome.withheld:
            out.withheld_spans.append((w.start_time, w.end_time))
            out.withheld_seconds += w.end_time - w.start_time
            out.withheld_languages.append(w.language_code or "?")

    try:
        for i in range(0, len(pcm), FRAME):
            if state.add_audio(pcm[i : i + FRAME], 1 << 30):
                show(await live_step(client, state, final=False), final=False)
        if state.has_new_audio:
            show(await live_step(client, state, final=True), final=True)
    except DomainError as exc:
        out.refused = f"{type(exc).__name__}: {exc.detail[:160]}"
    out.warnings = state.warnings
    return out


def pcm_of(audio: Any) -> bytes:
    import numpy as np

    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


def recordings(folder: Path, limit: int | None) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.suffix == ".wav" and p.with_suffix(".txt").exists())
    return files[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--limit", type=int, default=None, help="at most this many recordings per folder")
    parser.add_argument("--switch", nargs=2, type=Path, metavar=("ENG_DIR", "ZUL_DIR"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import numpy as np

    from contracts.settings import Settings
    from engines.speech.audio import load_audio
    from engines.speech.pipeline import get_pipeline

    settings = Settings(_env_file=None)
    pipeline = get_pipeline(settings.speech, settings.data_dir)
    pipeline.warm_up()
    served = set(pipeline.models.routes())
    client = Direct(pipeline)
    rows: dict[str, list[Session]] = defaultdict(list)
    started = time.perf_counter()
    for folder in args.folders:
        language = folder.name.split("-")[0].split("_")[0]
        for path in recordings(folder, args.limit):
            session = asyncio.run(live(client, pcm_of(load_audio(path)), path.name))
            if language in served:
                reference = clean_reference(path.with_suffix(".txt").read_text(encoding="utf-8"))
                session.errors, session.words = word_errors(reference, session.deltas)
            rows[folder.name].append(session)
            print(_line(folder.name, session), file=sys.stderr)
    if args.switch:
        english, zulu = (recordings(d, args.limit) for d in args.switch)
        pause = np.zeros(int(0.8 * 16_000), np.float32)
        for i, (eng, zul) in enumerate(zip(english, zulu)):
            second = english[(i + 1) % len(english)]
            audio = np.concatenate([load_audio(eng), pause, load_audio(zul), pause, load_audio(second)])
            session = asyncio.run(live(client, pcm_of(audio), f"{eng.stem}+{zul.stem}+{second.stem}"))
            reference = " ".join(
                clean_reference(p.with_suffix(".txt").read_text(encoding="utf-8")) for p in (eng, second)
            )
            session.errors, session.words = word_errors(reference, session.deltas)
            rows["switch"].append(session)
            print(_line("switch", session), file=sys.stderr)
    summary = {name: _summary(sessions) for name, sessions in rows.items()}
    print("\n| recordings | sessions | refused | with text | words sent | withheld s | languages | WER |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in summary.items():
        print(
            f"| {name} | {s['sessions']} | {s['refused']} | {s['with_text']} | {s['words_sent']} | "
            f"{s['withheld_seconds']:.1f} of {s['seconds']:.0f} | {s['languages']} | {s['wer']} |"
        )
    print(f"\n{time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "sessions": {k: [vars(s) for s in v] for k, v in rows.items()}}, indent=1)
        )


def _line(folder: str, s: Session) -> str:
    what = f"refused ({s.refused[:90]})" if s.refused else f"{len(s.deltas.split())} words sent"
    return f"{folder}/{s.name}: {s.seconds:.0f} s, {what}, withheld {s.withheld_seconds:.1f} s: {s.deltas[:100]!r}"


def _summary(sessions: list[Session]) -> dict[str, Any]:
    words = sum(s.words for s in sessions)
    languages: dict[str, int] = defaultdict(int)
    for s in sessions:
        for language, _ in s.completed:
            languages[language] += 1
    return {
        "sessions": len(sessions),
        "seconds": sum(s.seconds for s in sessions),
        "refused": sum(bool(s.refused) for s in sessions),
        "with_text": sum(bool(s.deltas.strip()) for s in sessions),
        "words_sent": sum(len(s.deltas.split()) for s in sessions),
        "withheld_seconds": sum(s.withheld_seconds for s in sessions),
        "languages": dict(languages),
        "wer": f"{sum(s.errors for s in sessions) / words:.3f}" if words else "-",
    }


if __name__ == "__main__":
    main()

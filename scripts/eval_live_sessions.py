"""Live sessions without a language on a running service, as a call centre streams them: real recordings over the
Live API (``/v1/realtime``) at real time, several at a time, each new one arriving while others are open.

    python scripts/eval_live_sessions.py --url http://127.0.0.1:8000 --token TOKEN DIR... [--limit N]
        [--concurrency 2] [--json OUT]

Folders as ``scripts/eval_real.py`` reads them (``<iso639-3>-<source>/<stem>.wav`` + ``<stem>.txt``; they stay
local for their licences). ``--concurrency`` workers each stream one recording after another (100 ms frames at
real time, no language, the session closed at the end), the second starting half a recording after the first, so
a session always arrives while another is open. Per folder: sessions refused at admission (503 before the upgrade:
what must never happen while the service keeps up), sessions ended for their language (``language_not_served``),
the words sent as deltas (in a language without a speech model every one of them is invented), the speech
withheld, and for served languages the word error of the deltas. At the end, with every session closed, one session
with its language given must be admitted at once.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
SERVED = {"eng", "afr", "fra"}


@dataclass
class Outcome:
    name: str
    seconds: float
    admission: str = ""  # why the upgrade was refused (503 at capacity)
    error: str = ""  # the error event that ended the session
    deltas: str = ""
    withheld_s: float = 0.0
    languages: list[str] = field(default_factory=list)


async def stream(url: str, token: str, pcm: bytes, name: str, language: str | None = None) -> Outcome:
    import httpx
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus
    from websockets.typing import Subprotocol

    out = Outcome(name, len(pcm) / 32_000)
    body: dict[str, Any] = {"session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}}
    if language:
        body["session"]["audio"]["input"]["transcription"] = {"language": language}
    async with httpx.AsyncClient(timeout=60) as http:
        minted = await http.post(f"{url}/v1/realtime/client_secrets", headers={"X-CLIENT-TOKEN": token}, json=body)
    minted.raise_for_status()
    protocols = [Subprotocol("realtime"), Subprotocol(f"vulavula-insecure-api-key.{minted.json()['value']}")]

    async def send(ws: Any) -> None:
        started = time.monotonic()
        for n, i in enumerate(range(0, len(pcm), FRAME)):
            audio = base64.b64encode(pcm[i : i + FRAME]).decode()
            await ws.send(json.dumps({"type": "session.input_audio_buffer.append", "audio": audio}))
            await asyncio.sleep(max(0.0, started + (n + 1) * 0.1 - time.monotonic()))
        await ws.send(json.dumps({"type": "session.close"}))

    try:
        async with connect(url.replace("http", "ws", 1) + "/v1/realtime", subprotocols=protocols) as ws:
            sender = asyncio.create_task(send(ws))
            async for raw in ws:
                event = json.loads(raw)
                kind = event.get("type")
                if kind == "session.input_transcript.delta":
                    out.deltas += event["delta"]
                elif kind == "session.input_transcript.withheld":
                    out.withheld_s += event["end_time"] - event["start_time"]
                elif kind == "session.input_transcript.completed":
                    out.languages.append(str(event.get("language")))
                elif kind == "error":
                    out.error = str(event["error"].get("code"))
                    break
                elif kind == "session.closed":
                    break
            sender.cancel()
    except InvalidStatus as refused:
        out.admission = f"{refused.response.status_code}: {refused.response.body[:100]!r}"
    return out


async def folder_sessions(url: str, token: str, files: list[Path], concurrency: int) -> list[Outcome]:
    from engines.speech.audio import load_audio
    from scripts.eval_live import pcm_of

    queue = list(files)
    outcomes: list[Outcome] = []

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)
        while queue:
            path = queue.pop(0)
            outcome = await stream(url, token, pcm_of(load_audio(path)), path.name)
            outcomes.append(outcome)
            print(_line(outcome), file=sys.stderr, flush=True)

    typical = sum(p.stat().st_size for p in files) / max(1, len(files)) / 32_000
    await asyncio.gather(*(worker(i * typical / concurrency) for i in range(concurrency)))
    return outcomes


def _line(o: Outcome) -> str:
    what = o.admission or o.error or f"{len(o.deltas.split())} words"
    return f"{o.name}: {o.seconds:.0f} s, {what}, withheld {o.withheld_s:.1f} s: {o.deltas[:80]!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows: dict[str, dict[str, Any]] = {}
    for folder in args.folders:
        language = folder.name.split("-")[0].split("_")[0]
        files = sorted(p for p in folder.iterdir() if p.suffix == ".wav")[: args.limit]
        outcomes = asyncio.run(folder_sessions(args.url, args.token, files, args.concurrency))
        errors = words = 0
        if language in SERVED:
            for o in outcomes:
                reference = clean_reference(folder.joinpath(Path(o.name).stem + ".txt").read_text(encoding="utf-8"))
                e, w = word_errors(reference, o.deltas)
                errors, words = errors + e, words + w
        languages: dict[str, int] = defaultdict(int)
        for o in outcomes:
            for code in o.languages:
                languages[code] += 1
        rows[folder.name] = {
            "sessions": len(outcomes),
            "refused at admission": sum(bool(o.admission) for o in outcomes),
            "ended for language": sum(o.error == "language_not_served" for o in outcomes),
            "other errors": sum(bool(o.error) and o.error != "language_not_served" for o in outcomes),
            "words sent": sum(len(o.deltas.split()) for o in outcomes),
            "withheld s": round(sum(o.withheld_s for o in outcomes), 1),
            "segment languages": dict(languages),
            "WER": round(errors / words, 3) if words else None,
        }
    started = time.monotonic()
    given = asyncio.run(stream(args.url, args.token, b"\0" * 32_000, "english given", language="eng"))
    admitted = not given.admission and not given.error
    print("\n| recordings | sessions | refused at admission | ended for language | words sent | withheld s | WER |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['sessions']} | {r['refused at admission']} | {r['ended for language']} | "
            f"{r['words sent']} | {r['withheld s']} | {r['WER'] if r['WER'] is not None else '-'} |"
        )
    print(
        f"\nThen, with none open, a session with its language given: admitted={admitted} "
        f"in {time.monotonic() - started:.2f} s {given.admission or given.error}"
    )
    if args.json:
        args.json.write_text(json.dumps({"folders": rows, "given_admitted": admitted}, indent=1))


if __name__ == "__main__":
    main()

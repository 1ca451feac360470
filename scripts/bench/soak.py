"""Soak test: a mixed load of normal and hostile requests for N minutes, reporting errors and memory growth.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/soak.py                      # starts `khuluma serve` itself, 30 minutes
    .venv/bin/python scripts/bench/soak.py --minutes 3
    .venv/bin/python scripts/bench/soak.py --url http://127.0.0.1:8000 --token khk_...   # a running service

Normal traffic: NER, sentiment, language ID, a knowledge-base upload and queries, sync transcription of a short
spoken sentence, v1 async jobs. Hostile traffic, one of each class of the reliability issue: a text past the
size limits, a lone surrogate, a WAV whose header claims hours (with diarisation), a .docx bomb, a 200 MB chunked
body, malformed JSON. Every hostile request must get its 4xx; no request may get a 5xx.

Memory: the PSS of the service's processes (``scripts/bench/_service.memory_processes``: the `khuluma serve`
command and Ray's processes it started; with ``--url``, Ray's processes on this machine), sampled every
``--sample-seconds``. The report gives it at the start (after a warm-up round), at the end and at its peak, and the
growth per hour from a least-squares line through the samples, so one large transient does not read as a leak.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime.processes import pss_mb  # noqa: E402
from scripts.bench._hostile import docx_bomb, lying_wav  # noqa: E402
from scripts.bench._service import memory_processes, start_service, stop_service  # noqa: E402
from scripts.bench._speech import espeak  # noqa: E402

KB = "/api/v1/search/knowledgebase"
MB = 1024 * 1024


@dataclass
class Outcome:
    kind: str
    status: int
    ms: float


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, status: int, ms: float, expected: Callable[[int], bool]) -> None:
        with self.lock:
            self.outcomes.append(Outcome(kind, status, ms))
            if not expected(status):
                self.unexpected.append(f"{kind}: {status}")


def ok(status: int) -> bool:
    return status == 200


def client_error(status: int) -> bool:
    return 400 <= status < 500


class Traffic:
    """The request kinds, each a function of an httpx client returning the status code."""

    def __init__(self, url: str, token: str, work: Path) -> None:
        self.url, self.h = url, {"X-CLIENT-TOKEN": token}
        self.speech = espeak("good morning, the weather today is sunny and warm", work / "speech.wav").read_bytes()
        self.lying = lying_wav(work / "lying.wav", seconds=1.0).read_bytes()
        self.bomb = docx_bomb(work / "bomb.docx", 200_000).read_bytes()
        self.kb_id = ""

    def setup(self, c: httpx.Client) -> None:
        r = c.post(f"{self.url}{KB}", headers=self.h, json={"knowledgebase_name": "soak"})
        r.raise_for_status()
        self.kb_id = r.json()["id"]
        doc = b"Minibus taxis carry most commuters in Johannesburg. The Drakensberg gets snow in winter.\n"
        c.post(
            f"{self.url}{KB}/{self.kb_id}/document", headers=self.h, files={"file": ("facts.txt", doc, "text/plain")}
        ).raise_for_status()

    def kinds(self) -> list[tuple[str, float, Callable[[httpx.Client], int], Callable[[int], bool]]]:
        u, h = self.url, self.h
        sentence = "Nelson Mandela was born in Mvezo and studied at Fort Hare. Ngiyabonga kakhulu!"
        return [
            (
                "ner",
                6,
                lambda c: (
                    c.post(
                        f"{u}/api/v1/entity_recognition/process", headers=h, json={"encoded_text": sentence}
                    ).status_code
                ),
                ok,
            ),
            (
                "sentiment",
                4,
                lambda c: (
                    c.post(
                        f"{u}/api/v1/sentiment_analysis/process", headers=h, json={"encoded_text": sentence}
                    ).status_code
                ),
                ok,
            ),
            (
                "langid",
                4,
                lambda c: c.post(f"{u}/api/v1/language/detect", headers=h, json={"text": sentence}).status_code,
                ok,
            ),
            (
                "kb-query",
                4,
                lambda c: (
                    c.post(f"{u}{KB}/{self.kb_id}/query", headers=h, json={"query": "snow in winter"}).status_code
                ),
                ok,
            ),
            ("kb-upload", 1, self._kb_upload, ok),
            (
                "transcribe",
                2,
                lambda c: (
                    c.post(
                        f"{u}/api/v2alpha/transcribe/sync/file?lang_code=eng",
                        headers=h,
                        files={"file": ("s.wav", self.speech)},
                    ).status_code
                ),
                ok,
            ),
            ("job", 1, self._job, ok),
            (
                "hostile-huge-text",
                1,
                lambda c: (
                    c.post(
                        f"{u}/api/v1/entity_recognition/process", headers=h, json={"encoded_text": "x" * 1_200_000}
                    ).status_code
                ),
                client_error,
            ),
            (
                "hostile-surrogate",
                1,
                lambda c: (
                    c.post(
                        f"{u}/api/v1/sentiment_analysis/process",
                        headers={**h, "content-type": "application/json"},
                        content=b'{"encoded_text": "abc \\ud800 def"}',
                    ).status_code
                ),
                client_error,
            ),
            (
                "hostile-lying-wav",
                1,
                lambda c: (
                    c.post(
                        f"{u}/api/v2alpha/transcribe/sync/file?lang_code=eng&diarise=true",
                        headers=h,
                        files={"file": ("l.wav", self.lying)},
                    ).status_code
                ),
                lambda s: s in (200, 400, 413, 415),
            ),
            (
                "hostile-docx-bomb",
                1,
                lambda c: (
                    c.post(
                        f"{u}{KB}/{self.kb_id}/document", headers=h, files={"file": ("b.docx", self.bomb)}
                    ).status_code
                ),
                client_error,
            ),
            (
                "hostile-chunked",
                1,
                lambda c: (
                    c.post(
                        f"{u}/api/v1/language/detect",
                        headers={**h, "content-type": "application/json"},
                        content=_chunked(200 * MB),
                    ).status_code
                ),
                lambda s: s == 413,
            ),
            (
                "hostile-bad-json",
                1,
                lambda c: (
                    c.post(
                        f"{u}/api/v1/language/detect",
                        headers={**h, "content-type": "application/json"},
                        content=b'{"text": ',
                    ).status_code
                ),
                lambda s: s == 400,
            ),
        ]

    def _kb_upload(self, c: httpx.Client) -> int:
        text = f"Note {random.random()}: the Orange River flows west to the Atlantic.\n".encode()
        return c.post(
            f"{self.url}{KB}/{self.kb_id}/document", headers=self.h, files={"file": ("note.txt", text, "text/plain")}
        ).status_code

    def _job(self, c: httpx.Client) -> int:
        blob = base64.b64encode(self.speech).decode()
        r = c.post(
            f"{self.url}/api/v1/transport/file-upload",
            headers=self.h,
            json={"file_name": "s.wav", "audio_blob": blob, "file_size": len(self.speech)},
        )
        if r.status_code != 200:
            return r.status_code
        return c.post(
            f"{self.url}/api/v1/transcribe/process/{r.json()['upload_id']}", headers=self.h, json={}
        ).status_code


def _chunked(total: int) -> Iterator[bytes]:
    yield b'{"file_name": "huge.wav", "audio_blob": "'
    chunk = b"QUFB" * 16384
    for _ in range(total // len(chunk)):
        yield chunk


def service_pss_mb(pid: int | None) -> float:
    return pss_mb(memory_processes(pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--url", help="a running service (default: start `khuluma serve` on a free port)")
    parser.add_argument("--token", default=os.environ.get("KHULUMA_TOKEN"), help="token for --url")
    parser.add_argument("--workers", type=int, default=4, help="concurrent clients")
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    random.seed(args.seed)

    work = Path(tempfile.mkdtemp(prefix="khuluma-soak-"))
    proc = None
    if args.url:
        if not args.token:
            parser.error("--url needs --token (or KHULUMA_TOKEN)")
        url, token = args.url.rstrip("/"), args.token
    else:
        print("starting khuluma serve ...", flush=True)
        proc, url, token = start_service(work, "soak")
    driver = proc.pid if proc else None
    try:
        traffic = Traffic(url, token, work)
        with httpx.Client(timeout=300) as c:
            traffic.setup(c)
            kinds = traffic.kinds()
            for _, _, call, _ in kinds:  # warm-up: every path once, models loaded, before the first sample
                call(c)
        samples: list[tuple[float, float]] = [(0.0, service_pss_mb(driver))]
        print(f"PSS after warm-up: {samples[0][1]:.0f} MB; running {args.minutes:g} min ...", flush=True)
        tally = Tally()
        deadline = time.monotonic() + args.minutes * 60
        start = time.monotonic()
        weights = [w for _, w, _, _ in kinds]

        def worker() -> None:
            with httpx.Client(timeout=300) as c:
                while time.monotonic() < deadline:
                    kind, _, call, expected = random.choices(kinds, weights)[0]
                    t0 = time.perf_counter()
                    try:
                        status = call(c)
                    except httpx.HTTPError as exc:
                        status = 599  # no answer at all counts as a server failure
                        tally.unexpected.append(f"{kind}: {type(exc).__name__}")
                    tally.add(kind, status, (time.perf_counter() - t0) * 1000, expected)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.workers)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(min(args.sample_seconds, max(0.1, deadline - time.monotonic())))
            samples.append((time.monotonic() - start, service_pss_mb(driver)))
        for t in threads:
            t.join()
    finally:
        if proc is not None:
            stop_service(proc)
    report(tally, samples, args)


def report(tally: Tally, samples: list[tuple[float, float]], args: argparse.Namespace) -> None:
    by_kind: dict[str, list[Outcome]] = defaultdict(list)
    for o in tally.outcomes:
        by_kind[o.kind].append(o)
    print(f"\n{'kind':<20}{'n':>7}{'p50 ms':>9}{'p99 ms':>9}  statuses")
    for kind, rows in sorted(by_kind.items()):
        ms = np.array([o.ms for o in rows])
        statuses = Counter(o.status for o in rows)
        print(
            f"{kind:<20}{len(rows):>7}{np.percentile(ms, 50):>9.0f}{np.percentile(ms, 99):>9.0f}  "
            + ", ".join(f"{s}x{n}" for s, n in sorted(statuses.items()))
        )
    total = len(tally.outcomes)
    server_errors = sum(1 for o in tally.outcomes if o.status >= 500)
    t = np.array([s[0] for s in samples])
    m = np.array([s[1] for s in samples])
    slope_h = float(np.polyfit(t, m, 1)[0] * 3600) if len(samples) > 2 and t[-1] > 0 else float("nan")
    print(f"\nrequests: {total}, 5xx or no answer: {server_errors}, unexpected statuses: {len(tally.unexpected)}")
    if tally.unexpected:
        print("  first unexpected:", "; ".join(tally.unexpected[:10]))
    print(
        f"service PSS: start {m[0]:.0f} MB, end {m[-1]:.0f} MB, peak {m.max():.0f} MB, "
        f"trend {slope_h:+.0f} MB/hour over {t[-1] / 60:.1f} min ({len(samples)} samples)"
    )
    print(
        json.dumps(
            {
                "requests": total,
                "server_errors": server_errors,
                "pss_start_mb": round(m[0]),
                "pss_end_mb": round(m[-1]),
                "pss_peak_mb": round(m.max()),
                "trend_mb_per_hour": round(slope_h),
            }
        )
    )
    sys.exit(1 if server_errors or tally.unexpected else 0)


if __name__ == "__main__":
    main()

"""``khuluma qualify``: is this installation sane, accurate and fast enough? A post-install check over HTTP, in the
spirit of the vendor's self-hosted qualification (our own code), against the self-hosted profile routes.

- **sanity**: ``GET /health`` answers 200 within ``--max-health-s``; ``POST /v1/translate`` translates, or says
  no translation model is installed (reported, not a failure: the offline default has none).
- **accuracy**: ``POST /v1/transcribe`` of a known sample, word error rate at most ``--max-wer``.
- **performance**: that transcription within ``--max-sync-s``; over the Live API (``/v1/realtime``, with a client
  secret minted with the token) the first transcript delta within ``--max-first-delta-s`` of the session's start,
  and the whole session done within ``--max-live-rtf`` times the audio's length.

No audio ships with Khuluma (none we may redistribute): without ``--audio`` the sample is spoken here at run time by
espeak-ng (an English sentence), else ``--audio FILE --reference TEXT`` (and ``--lang``) are needed. Exit code 0
only when every check passes.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from khuluma.cli.qualification import Outcome, Status, Thresholds, at_most, exit_code, failed, summary, table

SAMPLE_TEXT = "The weather in Johannesburg is sunny and warm today. Please call me back after the meeting."
# espeak's received-pronunciation English: Whisper base places it as English within its first 3 s, as it does real
# English (espeak's default English voice it places only at 0.5 to 0.75, so a session without a language would wait
# for 6 s of speech: docs/speech.md#live-sessions-without-a-language)
SAMPLE_VOICE = "en-gb-x-rp"
TRANSLATE_BODY = {"text": "Ngiyabonga kakhulu", "src_lang": "zul_Latn", "tgt_lang": "eng_Latn"}
NOT_INSTALLED = "No translation model is installed"
USER = "khuluma"  # the HTTP Basic user name (any name works: the password is the token)

err = Console(stderr=True)


@contextmanager
def sample(audio: Path | None, reference: str | None, lang: str | None) -> Iterator[tuple[Path, str, str | None]]:
    """The audio to qualify with, its reference text and language: the caller's, or one spoken by espeak-ng."""
    if audio is not None:
        if not audio.is_file() or not reference:
            raise typer.BadParameter("--audio needs an existing file and --reference (its transcript).")
        yield audio, reference, lang
        return
    if shutil.which("espeak-ng") is None:
        raise typer.BadParameter(
            "No audio: pass --audio FILE --reference TEXT [--lang L] (espeak-ng, which would speak a sample here, "
            "is not installed)."
        )
    with tempfile.TemporaryDirectory(prefix="khuluma-qualify-") as tmp:
        wav = Path(tmp) / "sample.wav"
        subprocess.run(
            ["espeak-ng", "-v", SAMPLE_VOICE, "-s", "140", "-w", str(wav), SAMPLE_TEXT],
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield wav, SAMPLE_TEXT, lang or "eng"


def check_health(client: Any, limits: Thresholds) -> Outcome:
    import httpx

    started = time.perf_counter()
    try:
        response = client.get("/health")
    except httpx.HTTPError as exc:
        return failed("sanity", "health", f"unreachable: {exc}")
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        return failed("sanity", "health", f"HTTP {response.status_code}: {response.text[:120]}")
    return at_most("sanity", "health", seconds, limits.max_health_s, digits=3)


def check_translate(client: Any) -> Outcome:
    import httpx

    try:
        response = client.post("/v1/translate", json=TRANSLATE_BODY)
    except httpx.HTTPError as exc:
        return failed("sanity", "translate", f"unreachable: {exc}")
    detail = _detail(response)
    if response.status_code == 503 and NOT_INSTALLED in detail:
        return Outcome("sanity", "translate", Status.NOT_INSTALLED, detail="no translation model (offline default)")
    if response.status_code == 200 and str(response.json().get("translated_text", "")).strip():
        return Outcome("sanity", "translate", Status.PASS, detail=response.json()["translated_text"][:60])
    return failed("sanity", "translate", f"HTTP {response.status_code}: {detail[:120]}")


def check_sync(client: Any, audio: Path, reference: str, lang: str | None, limits: Thresholds) -> list[Outcome]:
    """One sync transcription: its word error rate (accuracy) and its time (performance)."""
    import httpx

    from contracts.wer import word_error_rate

    params = {"lang_code": lang} if lang else {}
    started = time.perf_counter()
    try:
        with audio.open("rb") as f:
            response = client.post("/v1/transcribe", params=params, files={"file": (audio.name, f)})
    except httpx.HTTPError as exc:
        return [failed("accuracy", "sync WER", f"unreachable: {exc}"), failed("performance", "sync time", "")]
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        why = f"HTTP {response.status_code}: {_detail(response)[:120]}"
        return [failed("accuracy", "sync WER", why), failed("performance", "sync time", why)]
    text = response.json()["data"]["transcription_text"]
    return [
        at_most("accuracy", "sync WER", word_error_rate(reference, text), limits.max_wer, "", text[:60]),
        at_most("performance", "sync time", seconds, limits.max_sync_s),
    ]


def check_live(url: str, token: str, audio: Path, lang: str | None, limits: Thresholds, speed: float) -> list[Outcome]:
    """The live stream: seconds from the first audio to the first text, and the stream's real-time factor."""
    from khuluma.cli.stream import StreamError, file_frames, run_stream

    try:
        outcome = asyncio.run(run_stream(url, token, file_frames(audio), lang, speed, live_api=True))
    except StreamError as exc:
        return [failed("performance", "live first text", str(exc)), failed("performance", "live RTF", str(exc))]
    ready, first, done = outcome.started_at, outcome.first_text_at, outcome.final_at
    rtf = (done - ready) / outcome.audio_seconds if done is not None and outcome.audio_seconds else None
    return [
        at_most("performance", "live first text", None if first is None else first - ready, limits.max_first_delta_s),
        at_most("performance", "live RTF", rtf, limits.max_live_rtf, "", f"speed {speed:g}" if speed else "as fast"),
    ]


def _detail(response: Any) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    return str(detail if detail is not None else response.text)


def run_checks(
    url: str,
    token: str,
    audio: Path,
    reference: str,
    lang: str | None,
    limits: Thresholds,
    live_speed: float = 0.0,
    timeout: float = 300.0,
) -> list[Outcome]:
    import httpx

    with httpx.Client(base_url=url.rstrip("/"), auth=(USER, token), timeout=timeout) as client:
        outcomes = [check_health(client, limits), check_translate(client)]
        outcomes += check_sync(client, audio, reference, lang, limits)
    return outcomes + check_live(url, token, audio, lang, limits, live_speed)


def qualify(
    url: str = typer.Option("http://127.0.0.1:8000", "--url", envvar="KHULUMA_URL", help="The service's base URL."),
    token: str = typer.Option(..., "--token", envvar="KHULUMA_TOKEN", help="A token (sent as HTTP Basic password)."),
    audio: Path | None = typer.Option(None, "--audio", help="Known-good speech (default: spoken by espeak-ng)."),
    reference: str | None = typer.Option(None, "--reference", help="The transcript of --audio."),
    lang: str | None = typer.Option(None, "--lang", help="The language of --audio (default: detected)."),
    max_health_s: float = typer.Option(Thresholds.max_health_s, help="Health answer, seconds."),
    max_wer: float = typer.Option(Thresholds.max_wer, help="Word error rate of the sync transcription."),
    max_sync_s: float = typer.Option(Thresholds.max_sync_s, help="Sync transcription, seconds."),
    max_first_delta_s: float = typer.Option(Thresholds.max_first_delta_s, help="Live: first text, seconds."),
    max_live_rtf: float = typer.Option(Thresholds.max_live_rtf, help="Live: stream time / audio length."),
    live_speed: float = typer.Option(0.0, help="Live audio pace: 0 as fast as possible, 1 real time."),
) -> None:
    """Qualify an installation: sanity, accuracy and performance checks; exit 0 only when all pass."""
    limits = Thresholds(max_health_s, max_wer, max_sync_s, max_first_delta_s, max_live_rtf)
    with sample(audio, reference, lang) as (path, text, language):
        outcomes = run_checks(url, token, path, text, language, limits, live_speed)
    out = Console()
    out.print(table(outcomes))
    code = exit_code(outcomes)
    out.print(summary(outcomes), style="green" if code == 0 else "bold red")
    raise typer.Exit(code)

"""The playground in a real browser: Playwright drives Debian's chromium, headless, against the real Serve app.

The microphone is Chromium's fake capture device playing a generated WAV file once (``%noloop``), so the live tab
streams real speech through the Live API (``/v1/realtime``, with a client secret the page mints) exactly as a
user's microphone would. What the page shows is compared with what the API answers for the same input, never with
hard-coded model outputs.

Without Debian's chromium every test here is skipped (failed under CI=true: ``tests/tools.py``); without espeak-ng
only the two that play speech (the transcribe and live tabs) are: the other tabs need no generated audio, so their
browser has no microphone file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import Browser, Page, Playwright, Route, expect, sync_playwright

from scripts.eval_wer import word_errors
from tests.speechdata import silence, speech_16k, write_audio
from tests.tools import require_tool

pytestmark = pytest.mark.integration

SPOKEN = (
    "Good morning, thank you for calling the clinic. "
    "We are open from Monday to Friday, and the nurse will see you at nine o'clock."
)

# Each expectation waits for what the page shows after the service answers. On a loaded CI machine one text
# submission (entities, sentiment and language: three routes) has taken over 5 s, Playwright's default; these
# tests are about what the page shows, not how fast (timings live in scripts/bench/).
expect.set_options(timeout=60_000)


def _wer(reference: str, hypothesis: str) -> float:
    errors, words = word_errors(reference, hypothesis)
    return errors / max(words, 1)


@pytest.fixture(scope="module")
def spoken_wav(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """~9 s of speech with a second of silence either side, 16 kHz mono WAV; and its length in seconds."""
    folder = tmp_path_factory.mktemp("playground-audio")
    samples = np.concatenate([silence(1.0), speech_16k(SPOKEN, folder, "spoken"), silence(1.0)])
    return write_audio(samples, 16000, folder / "microphone.wav"), len(samples) / 16000


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


def _launch(playwright: Playwright, *extra_args: str) -> Browser:
    return playwright.chromium.launch(
        executable_path=require_tool("chromium"),
        headless=True,
        args=[
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",  # the machine's network is closed: no update checks
            "--disable-component-update",
            "--disable-sync",
            *extra_args,
        ],
    )


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """The browser of the tabs that need no microphone."""
    browser = _launch(playwright)
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def microphone_browser(playwright: Playwright, spoken_wav: tuple[Path, float]) -> Iterator[Browser]:
    """A browser whose fake microphone plays the spoken file once (the live tab)."""
    wav, _ = spoken_wav
    browser = _launch(
        playwright,
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
    )
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def token(make_token) -> str:
    return make_token("playground-user", "browser")


class Playground:
    """One browser tab on /playground, collecting the page's script errors (a test fails on any)."""

    def __init__(self, browser: Browser, url: str) -> None:
        self.context = browser.new_context(permissions=["microphone"])
        self.page: Page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", self._console)
        self.page.goto(f"{url}/playground")
        expect(self.page.locator("body")).to_have_attribute("data-ready", "true")

    def _console(self, message: Any) -> None:
        # Chromium logs every 4xx/5xx answer as "Failed to load resource": the page shows those itself
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(message.text)

    def sign_in(self, token: str) -> None:
        self.page.fill("#token", token)
        self.page.click("#signin button[type=submit]")

    def tab(self, name: str) -> None:
        self.page.click(f"#tab-{name}")
        expect(self.page.locator(f"#panel-{name}")).to_be_visible()

    def close(self, name: str) -> list[str]:
        if shots := os.environ.get("KHULUMA_PLAYGROUND_SCREENSHOTS"):  # a picture of each test's page, for review
            self.page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
        self.context.close()
        return self.errors


def _playground(browser: Browser, serve_url: str, request: pytest.FixtureRequest) -> Iterator[Playground]:
    tab = Playground(browser, serve_url)
    yield tab
    assert tab.close(request.node.name) == [], "the page logged errors"


@pytest.fixture()
def playground(browser: Browser, serve_url: str, request: pytest.FixtureRequest) -> Iterator[Playground]:
    yield from _playground(browser, serve_url, request)


@pytest.fixture()
def live_playground(
    microphone_browser: Browser, serve_url: str, request: pytest.FixtureRequest
) -> Iterator[Playground]:
    yield from _playground(microphone_browser, serve_url, request)


def test_wrong_token_shows_a_clear_message(playground: Playground, token: str) -> None:
    page = playground.page
    # before signing in, an action says what to do instead of failing silently
    page.click("#text-form button[type=submit]")
    expect(page.locator("#panel-text [data-error]")).to_contain_text("Paste your API token")

    playground.sign_in("kh_not-a-real-token")
    expect(page.locator("#signin-status")).to_contain_text("This token was refused (401)")
    assert page.evaluate("sessionStorage.getItem('khuluma-token')") is None

    playground.sign_in(token)
    expect(page.locator("#signin-status")).to_contain_text("Signed in")
    assert page.evaluate("sessionStorage.getItem('khuluma-token')") == token


def test_page_is_labelled_keyboard_usable_and_shows_the_models(
    playground: Playground, serve_url: str, token: str
) -> None:
    page = playground.page
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')]
                 .filter(c => !c.labels.length && !c.getAttribute('aria-label')).map(c => c.id || c.outerHTML)"""
    )
    assert unlabelled == []
    page.focus("#tab-text")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-translate")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#panel-translate")).to_be_visible()
    expect(page.locator("#tab-translate")).to_be_focused()
    page.keyboard.press("End")
    expect(page.locator("#panel-live")).to_be_visible()

    listing = httpx.get(f"{serve_url}/api/v1/models", timeout=30).json()["capabilities"]
    playground.sign_in(token)
    expect(page.locator("#signin-status")).to_contain_text("Signed in")
    playground.tab("translate")
    page.click("#translate-form button[type=submit]")
    answer = httpx.post(
        f"{serve_url}/api/v1/translate/process",
        json={
            "input_text": page.input_value("#translate-input"),
            "source_lang": page.input_value("#translate-source"),
            "target_lang": page.input_value("#translate-target"),
        },
        headers={"X-CLIENT-TOKEN": token},
        timeout=60,
    )
    if answer.status_code != 200:  # no model installed (the offline default): the 503 and its hint, as worded
        expect(page.locator("#panel-translate [data-error]")).to_have_text(
            f"{answer.status_code}: {answer.json()['detail']}"
        )
    else:
        expect(page.locator("#translation")).to_have_text(answer.json()["translation"][0]["translated_text"])
    translation = next(c for c in listing if c["capability"] == "translation")
    shown = page.locator('#panel-translate aside [data-capability="translation"]')
    expect(shown).to_contain_text("Model:" if translation["installed"] else "Not installed.")
    for language in translation["languages"]:
        expect(shown).to_contain_text(f"{language['name']} ({language['code']})")


def test_text_tab_highlights_the_entities(playground: Playground, token: str, serve_url: str) -> None:
    text = "Thandi Nkosi works for Standard Bank in Johannesburg. I love Durban, but the traffic is terrible!"
    answer = {
        route: httpx.post(f"{serve_url}{route}", json=body, headers={"X-CLIENT-TOKEN": token}, timeout=60).json()
        for route, body in [
            ("/api/v1/entity_recognition/process", {"encoded_text": text}),
            ("/api/v1/sentiment_analysis/process", {"encoded_text": text}),
        ]
    }
    entities = answer["/api/v1/entity_recognition/process"]
    assert entities, "the sentence has entities for the page to highlight"

    playground.sign_in(token)
    page = playground.page
    page.fill("#text-input", text)
    page.click("#text-form button[type=submit]")
    marks = page.locator("#entities mark")
    expect(marks).to_have_count(len(entities))
    shown: list[dict[str, Any]] = marks.evaluate_all(
        "ms => ms.map(m => ({word: m.firstChild.textContent, entity: m.dataset.kind}))"
    )
    assert shown == [{"word": e["word"], "entity": e["entity"]} for e in sorted(entities, key=lambda e: e["start"])]
    # the text around the marks is all there, in order
    without_tags = "p => { const c = p.cloneNode(true); c.querySelectorAll('.tag').forEach(t => t.remove()); "
    without_tags += "return c.textContent; }"
    assert page.locator("#entities").evaluate(without_tags) == text
    sentences = answer["/api/v1/sentiment_analysis/process"]["Sentiments"]
    expect(page.locator("#sentiments tbody tr")).to_have_count(len(sentences))
    expect(page.locator("#language-spans mark").first).to_be_visible()
    # how each sentence was read: its language and confidence, and what found each entity (as the API says)
    explained = httpx.post(
        f"{serve_url}/api/v1/entity_recognition/explain",
        json={"encoded_text": text},
        headers={"X-CLIENT-TOKEN": token},
        timeout=60,
    ).json()
    rows = page.locator("#entity-sentences tbody tr")
    expect(rows).to_have_count(len(explained["sentences"]))
    first = explained["sentences"][0]
    expect(rows.first).to_contain_text(f"{first['language']} {first['confidence']:.2f}")
    for entity in explained["entities"]:
        expect(page.locator("#entity-sentences")).to_contain_text(f"{entity['word']}: {entity['entity']}, by ")
    assert (
        marks.first.get_attribute("title") == sorted(explained["entities"], key=lambda e: e["start"])[0]["recogniser"]
    )
    assert playground.page.locator("#panel-text [data-error]").text_content() == ""


def test_knowledge_base_tab_uploads_by_drop_and_finds_a_passage(
    playground: Playground, token: str, serve_url: str
) -> None:
    page = playground.page

    def slow_listing(route: Route) -> None:
        # a loaded service lists slowly (as in CI): the create must not say "Created" before it can take a drop
        time.sleep(1.5)
        route.continue_()

    page.route("**/api/v1/search/knowledgebases", slow_listing)
    playground.sign_in(token)
    expect(playground.page.locator("#signin-status")).to_contain_text("Signed in")
    playground.tab("kb")
    page.fill("#kb-name", "ward notices")
    page.click("#kb-create-form button[type=submit]")
    expect(page.locator("#kb-status")).to_contain_text("Created ward notices")
    # dropped as soon as it says so: by then the new knowledge base is the one a file goes into
    notice = (
        "Soshanguve Block X Clinic is open from Monday to Friday, 07:30 to 19:00.\n\n"
        "Refuse in Ward 45 is collected every Wednesday before 06:30."
    )
    # a real drop event carrying a file, as a drag from the desktop delivers it
    page.evaluate(
        """([name, text]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([text], name, {type: 'text/plain'}));
            document.getElementById('kb-drop').dispatchEvent(
                new DragEvent('drop', {dataTransfer: transfer, bubbles: true, cancelable: true}));
        }""",
        ["notices.txt", notice],
    )
    expect(page.locator("#kb-status")).to_contain_text("notices.txt is uploaded and searchable", timeout=120_000)
    expect(page.locator("#kb-documents")).to_contain_text("notices.txt")
    expect(page.locator("#kb-select option:checked")).to_contain_text("ward notices (1 documents)")

    page.fill("#kb-query", "When is refuse collected in Ward 45?")
    page.click("#kb-query-form button[type=submit]")
    expect(page.locator("#kb-results li .passage").first).to_contain_text("Wednesday")
    expect(page.locator("#kb-results li .meta").first).to_contain_text("notices.txt")

    kb_id = page.locator("#kb-select").input_value()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#kb-delete")
    expect(page.locator("#kb-status")).to_contain_text("Deleted ward notices")
    listed = httpx.get(
        f"{serve_url}/api/v1/search/knowledgebases", headers={"X-CLIENT-TOKEN": token}, timeout=30
    ).json()
    assert kb_id not in [kb["id"] for kb in listed]


def test_transcribe_tab_words_seek_the_audio(
    playground: Playground, token: str, spoken_wav: tuple[Path, float]
) -> None:
    wav, _ = spoken_wav
    playground.sign_in(token)
    playground.tab("transcribe")
    page = playground.page
    page.set_input_files("#transcribe-file", str(wav))
    page.select_option("#transcribe-lang", "eng")
    page.click("#transcribe-form button[type=submit]")
    words = page.locator("#transcript button.word")
    expect(words.first).to_be_visible(timeout=180_000)
    assert _wer(SPOKEN, " ".join(words.all_text_contents())) <= 0.3
    expect(page.locator("#timeline button.speech").first).to_be_visible()

    third = words.nth(2)
    start = float(third.get_attribute("data-start") or "nan")
    third.click()
    page.wait_for_function(f"Math.abs(document.getElementById('transcribe-audio').currentTime - {start}) < 0.3")


def test_live_tab_streams_the_microphone(
    live_playground: Playground, token: str, serve_url: str, spoken_wav: tuple[Path, float]
) -> None:
    playground = live_playground
    wav, seconds = spoken_wav
    with httpx.Client(base_url=serve_url, headers={"X-CLIENT-TOKEN": token}, timeout=300) as client:
        sync = client.post(
            "/api/v2alpha/transcribe/sync/file?lang_code=eng",
            files={"file": ("microphone.wav", wav.read_bytes(), "audio/wav")},
        )
    assert sync.status_code == 200, sync.text
    sync_text = sync.json()["transcription_text"]

    playground.sign_in(token)
    expect(playground.page.locator("#signin-status")).to_contain_text("Signed in")
    playground.tab("live")
    page = playground.page
    page.select_option("#live-lang", "eng")
    started = time.monotonic()
    page.click("#live-start")  # the fake microphone starts playing the file now
    # a partial shows while the microphone is still open (Stop is clicked only after it). How soon is the
    # streaming bench's business (scripts/bench/bench_stream.py): a loaded CI machine must not fail this test.
    expect(page.locator("#live-partial")).not_to_be_empty(timeout=120_000)
    print(f"first partial after {time.monotonic() - started:.1f} s of {seconds:.1f} s")
    expect(page.locator("#live-language")).to_have_text("eng")

    page.wait_for_timeout(max(0.0, seconds + 0.5 - (time.monotonic() - started)) * 1000)
    page.click("#live-stop")
    expect(page.locator("#live-status")).to_contain_text("Done:", timeout=120_000)
    final = page.locator("#live-final").text_content() or ""
    print(f"sync: {sync_text!r}\nlive: {final!r}")
    assert _wer(sync_text, final) <= 0.25, (sync_text, final)
    assert page.locator("#live-partial").text_content() == ""
    assert page.locator("#panel-live [data-error]").text_content() == ""

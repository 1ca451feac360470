"""The playground's files as the ingress serves them: types, a strict CSP, nothing but the shipped assets."""

from __future__ import annotations

import re

import pytest

from serve_app.routers.playground import ASSETS


@pytest.fixture()
def client(local_app):
    return local_app()


@pytest.mark.parametrize("path", ["/playground", "/playground/"])
def test_page_is_served_with_a_strict_policy(client, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    policy = r.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "object-src 'none'" in policy
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "<h1>Khuluma playground</h1>" in r.text


def test_every_asset_the_page_names_is_served_from_this_origin(client) -> None:
    page = client.get("/playground").text
    names = re.findall(r'(?:src|href)="(/playground/[^"]+)"', page)
    assert {"/playground/playground.js", "/playground/playground.css"} <= set(names)
    script = client.get("/playground/playground.js").text
    names += re.findall(r'addModule\("(/playground/[^"]+)"\)', script)  # the microphone's audio worklet
    assert "/playground/pcm-worklet.js" in names
    for name in names:
        r = client.get(name)
        assert r.status_code == 200, name
        assert r.headers["content-type"].split(";")[0] in {"text/javascript", "text/css"}
    # no CDN: the page and the script name no other origin
    assert not re.search(r"""(src|href)=["']https?://""", page)
    assert not re.search(r"""(fetch|import|addModule)\(\s*["']https?://""", script)


@pytest.mark.parametrize(
    "path",
    [
        "/playground/../pyproject.toml",
        "/playground/%2e%2e%2fpyproject.toml",
        "/playground/nope.js",
        "/playground/.hidden.js",
        "/playground/playground.py",
    ],
)
def test_nothing_else_is_served(client, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert r.json() == {"detail": "Not Found"}


def test_no_script_sets_html_from_data() -> None:
    """Text from the API goes into the page as text nodes only; the CSP is the second line of defence."""
    for script in ASSETS.glob("*.js"):
        source = script.read_text(encoding="utf-8")
        assert not re.search(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write", source), script.name

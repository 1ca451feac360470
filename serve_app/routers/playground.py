"""The browser playground: static HTML, CSS and JavaScript shipped in the package, served by the ingress.

No CDN and no build step: the service runs offline. The page calls the public API with the token the user pastes
(kept in the browser's session storage), so it has no privileges of its own. A strict Content-Security-Policy
allows only this origin's scripts and styles, so text the API echoes back can never run as code.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

router = APIRouter(include_in_schema=False)

ASSETS = Path(__file__).resolve().parent.parent / "playground"
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self' ws: wss:; "
        "media-src 'self' blob:; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # a new release's page never runs with an old script
}


def _asset(name: str) -> FileResponse:
    path = ASSETS / name
    # only the shipped files by their plain names: no sub-paths, no dot-files, no other types
    if "/" in name or name.startswith(".") or path.suffix not in _MEDIA_TYPES or not path.is_file():
        raise HTTPException(status_code=404, detail="Not Found")
    return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers=_HEADERS)


@router.get("/playground")
@router.get("/playground/")
async def playground() -> FileResponse:
    return _asset("index.html")


@router.get("/playground/{name}")
async def playground_asset(name: str) -> FileResponse:
    return _asset(name)

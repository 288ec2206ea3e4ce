"""/dashboard: the page and its assets, served from the package. The page needs no auth; its
script sends the user's token with every API call."""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Path, Response

from api.errors import NotFound

router = APIRouter(tags=["dashboard"], include_in_schema=False)

STATIC = resources.files("api.dashboard") / "static"
ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
# The page runs only our own script and talks only to this origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


@router.get("/dashboard")
def page() -> Response:
    html = (STATIC / "index.html").read_bytes()
    return Response(html, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


@router.get("/dashboard/static/{name}")
def asset(name: Annotated[str, Path(max_length=40)]) -> Response:
    if name not in ASSETS:
        raise NotFound(f"no dashboard asset {name!r}")
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache"}
    return Response((STATIC / name).read_bytes(), media_type=ASSETS[name], headers=headers)

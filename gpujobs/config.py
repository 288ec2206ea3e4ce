"""Where the SDK and CLI find the API and their token.

Precedence, highest first:
1. explicit arguments (`Client(url=..., token=...)`, `gpujobs --url/--token`);
2. the environment: `GPUJOBS_URL`, `GPUJOBS_TOKEN`;
3. the credentials file that `make run` writes: JSON `{"url": ..., "token": ...}` at
   `GPUJOBS_CREDENTIALS_FILE`, else `~/.config/gpujobs/credentials.json`;
4. the default URL, `http://127.0.0.1:8000` (and no token).

The file's token is only used for the file's own URL (or when no URL is given anywhere else), so
pointing `GPUJOBS_URL` at another server never sends it the local embedded-mode token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "GPUJOBS_URL"
TOKEN_ENV = "GPUJOBS_TOKEN"
CREDENTIALS_ENV = "GPUJOBS_CREDENTIALS_FILE"


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str | None
    source: str  # where the token came from: "argument", "environment", a file path, or "none"


def credentials_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    configured = env.get(CREDENTIALS_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".config" / "gpujobs" / "credentials.json"


def read_credentials_file(path: Path) -> dict[str, Any]:
    """The file's url and token; an absent or unreadable file is simply no credentials."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _same_server(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def resolve(
    *,
    url: str | None = None,
    token: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Credentials:
    env = os.environ if environ is None else environ
    path = credentials_path(env)
    stored = read_credentials_file(path)
    stored_url = stored.get("url") if isinstance(stored.get("url"), str) else None
    stored_token = stored.get("token") if isinstance(stored.get("token"), str) else None

    resolved_url = url or env.get(URL_ENV) or stored_url or DEFAULT_URL
    resolved_url = resolved_url.rstrip("/")
    if token:
        return Credentials(url=resolved_url, token=token, source="argument")
    if env.get(TOKEN_ENV):
        return Credentials(url=resolved_url, token=env[TOKEN_ENV], source="environment")
    if stored_token and _same_server(stored_url or DEFAULT_URL, resolved_url):
        return Credentials(url=resolved_url, token=stored_token, source=str(path))
    return Credentials(url=resolved_url, token=None, source="none")

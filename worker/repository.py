"""Every query the control loop makes."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from api.jobs import repository as jobs
from api.models import Job, JobAttempt, JobEvent
from gpujobs.resources import JobStatus


def claim_pending(
    session: Session, *, token: str, now: datetime, ttl: timedelta, limit: int
) -> list[str]:
    """Claim up to `limit` PENDING jobs for this scheduler run.

    `FOR UPDATE SKIP LOCKED` keeps two schedulers off the same rows while they claim; the lock
    token and its expiry keep them off for the rest of the run, and let a crashed run's claims
    lapse. SQLite has no row locks (and one writer at a time), so the token alone is enough.
    """
    ids = list(
        session.scalars(
            select(Job.id)
            .where(
                Job.status == JobStatus.PENDING.value,
                or_(Job.lock_expires_at.is_(None), Job.lock_expires_at < now),
                or_(Job.not_before.is_(None), Job.not_before <= now),
            )
            .order_by(Job.priority.desc(), Job.id)
            .limit(limit)
            .with_for_update(skip_locked=True, of=Job)
        )
    )
    if ids:
        session.execute(
            update(Job)
            .where(Job.id.in_(ids))
            .values(lock_token=token, lock_expires_at=now + ttl)
            .execution_options(synchronize_session=False)
        )
    return ids


# The API's queries, not copies: the control loop reads and locks these rows the same way.
job_for_update = jobs.get_for_update
open_attempt = jobs.open_attempt
open_standby = jobs.open_standby


def claimed_job(session: Session, *, job_id: str, token: str) -> Job | None:
    """The job, locked, if this run's claim on it still holds; None if another run took over."""
    return session.scalars(
        select(Job)
        .where(
            Job.id == job_id,
            Job.lock_token == token,
            Job.status == JobStatus.PENDING.value,
        )
        .with_for_update(of=Job)
    ).first()


def last_event_reason(session: Session, *, job_id: str) -> str | None:
    """The reason of the job's latest event (None without one)."""
    return session.scalar(
        select(JobEvent.reason)
        .where(JobEvent.job_id == job_id)
        .order_by(JobEvent.id.desc())
        .limit(1)
    )


def jobs_by_ids(session: Session, *, ids: list[str]) -> list[Job]:
    return list(session.scalars(select(Job).where(Job.id.in_(ids)))) if ids else []


def open_attempts(
    session: Session, *, job_status: JobStatus | None = None
) -> list[tuple[Job, JobAttempt]]:
    """Attempts not yet ended, with their jobs, oldest first (only jobs in `job_status`)."""
    query = (
        select(Job, JobAttempt)
        .join(JobAttempt, JobAttempt.job_id == Job.id)
        .where(JobAttempt.ended_at.is_(None))
        .order_by(JobAttempt.created_at)
    )
    if job_status is not None:
        query = query.where(Job.status == job_status.value)
    return [(job, attempt) for job, attempt in session.execute(query).all()]


def attempt_for_update(session: Session, *, attempt_id: str) -> JobAttempt | None:
    return session.scalars(
        select(JobAttempt).where(JobAttempt.id == attempt_id).with_for_update()
    ).first()


def notes(session: Session, *, job_id: str) -> list[dict[str, Any]]:
    """The data of the job's events that changed no status (api.jobs.lifecycle.note)."""
    query = select(JobEvent.data).where(
        JobEvent.job_id == job_id, JobEvent.from_status == JobEvent.to_status
    )
    return list(session.scalars(query))


def note_reasons(session: Session, *, job_id: str) -> list[tuple[str | None, dict[str, Any]]]:
    """The reason and data of the job's events that changed no status."""
    query = select(JobEvent.reason, JobEvent.data).where(
        JobEvent.job_id == job_id, JobEvent.from_status == JobEvent.to_status
    )
    return [(reason, data) for reason, data in session.execute(query)]


def release_claims(session: Session, *, token: str) -> None:
    session.execute(
        update(Job)
        .where(Job.lock_token == token)
        .values(lock_token=None, lock_expires_at=None)
        .execution_options(synchronize_session=False)
    )

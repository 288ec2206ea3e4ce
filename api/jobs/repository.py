"""Every query about jobs, their attempts and events lives here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session, lazyload

from api.models import AttemptRole, Job, JobAttempt, JobEvent
from gpujobs.resources import TERMINAL_STATUSES

TERMINAL = [status.value for status in TERMINAL_STATUSES]
# A team reading its own jobs knows its name: no join to teams (the relationship's default).
OWN_TEAM = lazyload(Job.team)


def get(session: Session, *, job_id: str, team_id: str | None) -> Job | None:
    """A job visible to `team_id` (None = any team, for admins and the control loop)."""
    query = select(Job).where(Job.id == job_id)
    if team_id is not None:
        query = query.where(Job.team_id == team_id).options(OWN_TEAM)
    return session.scalars(query).first()


def by_id_prefix(session: Session, *, prefix: str, team_id: str | None, limit: int) -> list[Job]:
    """Jobs whose id starts with `prefix` (lower-case hex and dashes only: no LIKE wildcards)."""
    query = select(Job).where(Job.id.startswith(prefix)).order_by(Job.id.desc()).limit(limit)
    if team_id is not None:
        query = query.where(Job.team_id == team_id).options(OWN_TEAM)
    return list(session.scalars(query))


def newest_by_name(session: Session, *, name: str, team_id: str | None) -> Job | None:
    query = select(Job).where(Job.name == name).order_by(Job.id.desc()).limit(1)
    if team_id is not None:
        query = query.where(Job.team_id == team_id).options(OWN_TEAM)
    return session.scalars(query).first()


def active_with_name(session: Session, *, name: str, team_id: str) -> Job | None:
    return session.scalars(
        select(Job)
        .where(Job.team_id == team_id, Job.name == name, Job.status.not_in(TERMINAL))
        .limit(1)
    ).first()


def get_for_update(session: Session, *, job_id: str) -> Job | None:
    return session.scalars(select(Job).where(Job.id == job_id).with_for_update(of=Job)).first()


def find_by_idempotency_key(session: Session, *, team_id: str, key: str) -> Job | None:
    return session.scalars(
        select(Job).where(Job.team_id == team_id, Job.idempotency_key == key)
    ).first()


def list_page(
    session: Session,
    *,
    team_id: str | None,
    statuses: Sequence[str],
    before_id: str | None,
    limit: int,
) -> list[Job]:
    """Newest first. Ids are time-ordered (UUIDv7), so `id < cursor` is a stable cursor."""
    query = select(Job).order_by(Job.id.desc()).limit(limit)
    if team_id is not None:
        query = query.where(Job.team_id == team_id).options(OWN_TEAM)
    if statuses:
        query = query.where(Job.status.in_(statuses))
    if before_id is not None:
        query = query.where(Job.id < before_id)
    return list(session.scalars(query))


def events(session: Session, *, job_id: str) -> list[JobEvent]:
    return list(
        session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
    )


def attempts(session: Session, *, job_id: str) -> list[JobAttempt]:
    return list(
        session.scalars(
            select(JobAttempt).where(JobAttempt.job_id == job_id).order_by(JobAttempt.number)
        )
    )


def latest_attempt(session: Session, *, job_id: str) -> JobAttempt | None:
    """The job's newest attempt, open or ended, standbys never promoted aside (only the newest
    can be open)."""
    query = select(JobAttempt).where(
        JobAttempt.job_id == job_id, JobAttempt.role == AttemptRole.PRIMARY
    )
    return session.scalars(query.order_by(JobAttempt.number.desc()).limit(1)).first()


def open_attempt(session: Session, *, job_id: str, for_update: bool = False) -> JobAttempt | None:
    """The job's attempt that has not ended, a standby aside (locked with `for_update`, as the
    control loop does before stopping it)."""
    return _open(session, job_id=job_id, role=AttemptRole.PRIMARY, for_update=for_update)


def open_standby(session: Session, *, job_id: str, for_update: bool = False) -> JobAttempt | None:
    """The standby held beside the job's running attempt, if any (one at a time)."""
    return _open(session, job_id=job_id, role=AttemptRole.STANDBY, for_update=for_update)


def _open(
    session: Session, *, job_id: str, role: AttemptRole, for_update: bool
) -> JobAttempt | None:
    query = (
        select(JobAttempt)
        .where(
            JobAttempt.job_id == job_id,
            JobAttempt.ended_at.is_(None),
            JobAttempt.role == role,
        )
        .order_by(JobAttempt.number.desc())
    )
    if for_update:
        query = query.with_for_update()
    return session.scalars(query).first()


@dataclass(frozen=True)
class Ledger:
    """A job's latest attempt, the standby held beside it if any, and what its attempts'
    recorded costs add up to."""

    latest: JobAttempt
    recorded_microusd: int
    standby: JobAttempt | None = None


def ledgers(session: Session, *, job_ids: Sequence[str]) -> dict[str, Ledger]:
    """Per job, in one query however many jobs (a list page): the latest attempt, and the sum
    of the recorded costs (every ended attempt has one). Jobs never placed are absent."""
    if not job_ids:
        return {}
    totals = (
        select(
            JobAttempt.job_id,
            func.max(case((JobAttempt.role == AttemptRole.PRIMARY, JobAttempt.number))).label(
                "last"
            ),
            func.coalesce(func.sum(JobAttempt.cost_microusd), 0).label("recorded"),
        )
        .where(JobAttempt.job_id.in_(job_ids))
        .group_by(JobAttempt.job_id)
        .subquery()
    )
    query = select(JobAttempt, totals.c.recorded).join(
        totals, and_(JobAttempt.job_id == totals.c.job_id, JobAttempt.number == totals.c.last)
    )
    standbys = {
        attempt.job_id: attempt
        for attempt in session.scalars(
            select(JobAttempt).where(
                JobAttempt.job_id.in_(job_ids),
                JobAttempt.role == AttemptRole.STANDBY,
                JobAttempt.ended_at.is_(None),
            )
        )
    }
    # PostgreSQL sums BIGINTs as NUMERIC: back to an exact int.
    return {
        attempt.job_id: Ledger(
            latest=attempt,
            recorded_microusd=int(recorded),
            standby=standbys.get(attempt.job_id),
        )
        for attempt, recorded in session.execute(query)
    }


def counts_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(select(Job.status, func.count()).group_by(Job.status))
    return {status: count for status, count in rows}

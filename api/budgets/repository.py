"""Every query about budgets and the month's spend."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from api.models import Job, JobAttempt, Team, TeamBudget
from gpujobs.resources import JobStatus


@dataclass(frozen=True, slots=True)
class Charge:
    """One attempt as spend needs it."""

    price_per_hour: float  # whole attempt
    started_at: datetime
    ended_at: datetime | None
    cost_microusd: int | None


def get(session: Session, *, team_id: str) -> TeamBudget | None:
    return session.get(TeamBudget, team_id)


def lock(session: Session, *, team_id: str) -> TeamBudget | None:
    """The team's budget row, locked until the transaction ends: admissions of one team queue
    here, so each sees the holds of those before it (SQLite serializes writers anyway)."""
    return session.scalars(
        select(TeamBudget).where(TeamBudget.team_id == team_id).with_for_update()
    ).first()


def holds(session: Session, *, team_id: str | None) -> dict[str, tuple[str, int]]:
    """Unfinished jobs that hold part of a team's (or, None, every team's) budget:
    job id -> (team id, micro-dollars held)."""
    active = [s.value for s in JobStatus if not s.terminal]
    query = select(Job.id, Job.team_id, Job.quote_hold_microusd).where(
        Job.holds_budget.is_(True),
        Job.status.in_(active),
        Job.quote_hold_microusd.is_not(None),
    )
    if team_id is not None:
        query = query.where(Job.team_id == team_id)
    return {job_id: (owner, int(hold)) for job_id, owner, hold in session.execute(query)}


def teams(session: Session, *, team_id: str | None) -> list[tuple[str, str, int | None]]:
    """One team or every team, by name: (team id, name, monthly budget in micro-dollars or None)."""
    query = (
        select(Team.id, Team.name, TeamBudget.monthly_microusd)
        .outerjoin(TeamBudget, TeamBudget.team_id == Team.id)
        .order_by(Team.name)
    )
    if team_id is not None:
        query = query.where(Team.id == team_id)
    return [(id_, name, monthly) for id_, name, monthly in session.execute(query)]


def job_charges(session: Session, *, job_ids: list[str]) -> dict[str, list[Charge]]:
    """Every attempt of these jobs, by job: what each has spent so far."""
    found: dict[str, list[Charge]] = {job_id: [] for job_id in job_ids}
    if job_ids:
        found |= grouped_charges(
            session,
            by=JobAttempt.job_id,
            where=[JobAttempt.job_id.in_(job_ids), JobAttempt.started_at.is_not(None)],
        )
    return found


def ran_during(start: datetime, end: datetime) -> ColumnElement[bool]:
    """Attempts that ran during [start, end): started before `end`, not ended before `start`."""
    return and_(
        JobAttempt.started_at.is_not(None),
        JobAttempt.started_at < end,
        or_(JobAttempt.ended_at.is_(None), JobAttempt.ended_at > start),
    )


def grouped_charges(
    session: Session,
    *,
    by: InstrumentedAttribute[str],
    where: Sequence[ColumnElement[bool]],
) -> dict[str, list[Charge]]:
    """Attempts as charges, grouped by a column of the attempt or of its team (`Team.name`)."""
    query = select(
        by,
        JobAttempt.price_per_hour,
        JobAttempt.started_at,
        JobAttempt.ended_at,
        JobAttempt.cost_microusd,
    ).where(*where)
    if by.class_ is Team:
        query = query.join(Team, Team.id == JobAttempt.team_id)
    found: dict[str, list[Charge]] = defaultdict(list)
    for key, price, started, ended, cost in session.execute(query):
        found[key].append(Charge(price, started, ended, cost))
    return dict(found)


def put(session: Session, *, team_id: str, monthly_microusd: int) -> TeamBudget:
    budget = get(session, team_id=team_id)
    if budget is None:
        budget = TeamBudget(team_id=team_id, monthly_microusd=monthly_microusd)
        session.add(budget)
    else:
        budget.monthly_microusd = monthly_microusd
    session.flush()
    return budget


def delete(session: Session, *, team_id: str) -> bool:
    budget = get(session, team_id=team_id)
    if budget is None:
        return False
    session.delete(budget)
    session.flush()
    return True


def charges(
    session: Session, *, team_id: str | None, start: datetime, end: datetime
) -> dict[str, list[Charge]]:
    """A team's (or every team's) attempts that ran during [start, end), by team id."""
    where = [ran_during(start, end)]
    if team_id is not None:
        where.append(JobAttempt.team_id == team_id)
    return grouped_charges(session, by=JobAttempt.team_id, where=where)

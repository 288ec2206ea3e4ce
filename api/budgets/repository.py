"""Every query about budgets and the month's spend."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.models import Job, JobAttempt, TeamBudget
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


def holds(session: Session, *, team_id: str) -> dict[str, int]:
    """Unfinished jobs that hold part of the team's budget: job id -> micro-dollars held."""
    active = [s.value for s in JobStatus if not s.terminal]
    rows = session.execute(
        select(Job.id, Job.quote_hold_microusd).where(
            Job.team_id == team_id,
            Job.holds_budget.is_(True),
            Job.status.in_(active),
            Job.quote_hold_microusd.is_not(None),
        )
    )
    return {job_id: int(hold) for job_id, hold in rows}


def job_charges(session: Session, *, job_ids: list[str]) -> dict[str, list[Charge]]:
    """Every attempt of these jobs, by job: what each has spent so far."""
    found: dict[str, list[Charge]] = {job_id: [] for job_id in job_ids}
    if not job_ids:
        return found
    rows = session.execute(
        select(
            JobAttempt.job_id,
            JobAttempt.price_per_hour,
            JobAttempt.started_at,
            JobAttempt.ended_at,
            JobAttempt.cost_microusd,
        ).where(JobAttempt.job_id.in_(job_ids), JobAttempt.started_at.is_not(None))
    )
    for job_id, price, started, ended, cost in rows:
        found[job_id].append(Charge(price, started, ended, cost))
    return found


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


def charges(session: Session, *, team_id: str, start: datetime, end: datetime) -> list[Charge]:
    """The team's attempts that ran during [start, end): started before `end`, not ended before
    `start`."""
    rows = session.execute(
        select(
            JobAttempt.price_per_hour,
            JobAttempt.started_at,
            JobAttempt.ended_at,
            JobAttempt.cost_microusd,
        ).where(
            JobAttempt.team_id == team_id,
            JobAttempt.started_at.is_not(None),
            JobAttempt.started_at < end,
            or_(JobAttempt.ended_at.is_(None), JobAttempt.ended_at > start),
        )
    )
    return [Charge(price, started, ended, cost) for price, started, ended, cost in rows]

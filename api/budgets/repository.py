"""Every query about budgets and the month's spend."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from api.budgets.spend import Charge
from api.models import AttemptRole, Job, JobAttempt, Team, TeamBudget
from gpujobs.resources import JobStatus


def get(session: Session, *, team_id: str) -> TeamBudget | None:
    return session.get(TeamBudget, team_id)


def lock(session: Session, *, team_id: str) -> TeamBudget | None:
    """The team's budget row, locked until the transaction ends: admissions of one team queue
    here, so each sees the holds of those before it (SQLite serializes writers anyway)."""
    return session.scalars(
        select(TeamBudget).where(TeamBudget.team_id == team_id).with_for_update()
    ).first()


def _runs() -> ColumnElement[bool]:
    """The job has an attempt that started and has not ended: it burns money now."""
    return exists().where(
        JobAttempt.job_id == Job.id,
        JobAttempt.started_at.is_not(None),
        JobAttempt.ended_at.is_(None),
    )


def commitments(session: Session, *, team_id: str | None) -> dict[str, tuple[str, int | None]]:
    """Unfinished jobs that commit part of a team's (or, None, every team's) budget: those that
    hold their quote, and those that run: job id -> (team id, micro-dollars of the hold, None
    when it holds none)."""
    active = [s.value for s in JobStatus if not s.terminal]
    holding = and_(Job.holds_budget.is_(True), Job.quote_hold_microusd.is_not(None))
    query = select(Job.id, Job.team_id, Job.holds_budget, Job.quote_hold_microusd).where(
        Job.status.in_(active), or_(holding, _runs())
    )
    if team_id is not None:
        query = query.where(Job.team_id == team_id)
    return {
        job_id: (owner, _hold(holds, hold)) for job_id, owner, holds, hold in session.execute(query)
    }


def _hold(holds_budget: bool, hold: int | None) -> int | None:
    return int(hold) if holds_budget and hold is not None else None


@dataclass(frozen=True, slots=True)
class Running:
    """A running job of a team that has a budget, as budget enforcement needs it."""

    job_id: str
    team_id: str
    team_name: str
    budget_microusd: int
    priority: int
    spec: dict[str, Any]
    hold_microusd: int | None  # while it holds its quote
    started_at: datetime  # its open attempt's
    stopping: bool  # a stop was asked of its open attempt


def running_under_budget(session: Session) -> list[Running]:
    """RUNNING jobs with a started, open attempt, of teams that have a budget, by team name."""
    query = (
        select(
            Job.id,
            Job.team_id,
            Team.name,
            TeamBudget.monthly_microusd,
            Job.priority,
            Job.spec,
            Job.holds_budget,
            Job.quote_hold_microusd,
            JobAttempt.started_at,
            JobAttempt.stop_reason,
        )
        .join(JobAttempt, JobAttempt.job_id == Job.id)
        .join(TeamBudget, TeamBudget.team_id == Job.team_id)
        .join(Team, Team.id == Job.team_id)
        .where(
            Job.status == JobStatus.RUNNING.value,
            JobAttempt.started_at.is_not(None),
            JobAttempt.ended_at.is_(None),
            # a standby's burn is in the job's charges; a budget stop stops the running attempt
            JobAttempt.role == AttemptRole.PRIMARY,
        )
        .order_by(Team.name, Job.id, JobAttempt.number)
    )
    found: dict[str, Running] = {}
    for row in session.execute(query):
        job_id, owner, name, monthly, priority, spec, holds, hold, started, stop = row
        # One open attempt per job; should there be more, the last one counts, stopping if any is.
        stopping = stop is not None or (job_id in found and found[job_id].stopping)
        found[job_id] = Running(
            job_id=job_id,
            team_id=owner,
            team_name=name,
            budget_microusd=int(monthly),
            priority=priority,
            spec=spec or {},
            hold_microusd=_hold(holds, hold),
            started_at=started,
            stopping=stopping,
        )
    return list(found.values())


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


def charges_by_team(
    session: Session, *, start: datetime, end: datetime, team_id: str | None = None
) -> dict[str, list[Charge]]:
    """Every team's (or one team's) attempts that ran during [start, end), by team name."""
    where = [ran_during(start, end)]
    if team_id is not None:
        where.append(JobAttempt.team_id == team_id)
    return grouped_charges(session, by=Team.name, where=where)

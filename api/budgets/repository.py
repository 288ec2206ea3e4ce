"""Every query about budgets and the month's spend."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.models import JobAttempt, TeamBudget


@dataclass(frozen=True, slots=True)
class Charge:
    """One attempt as spend needs it."""

    price_per_hour: float  # whole attempt
    started_at: datetime
    ended_at: datetime | None
    cost_microusd: int | None


def get(session: Session, *, team_id: str) -> TeamBudget | None:
    return session.get(TeamBudget, team_id)


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

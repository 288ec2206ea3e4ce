"""Every query about teams, and the per-team figures the metrics token may read."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.budgets.repository import Charge, grouped_charges, ran_during
from api.models import Job, JobAttempt, Team


def get_by_name(session: Session, *, name: str) -> Team | None:
    return session.scalars(select(Team).where(Team.name == name)).first()


def add(session: Session, *, name: str) -> Team | None:
    """The new team, or None when the name was taken meanwhile (by a concurrent request)."""
    team = Team(name=name)
    try:
        with session.begin_nested():
            session.add(team)
    except IntegrityError:
        return None
    return team


def all_teams(session: Session) -> list[Team]:
    return list(session.scalars(select(Team).order_by(Team.name)))


def jobs_by_team_and_status(session: Session) -> dict[tuple[str, str], int]:
    rows = session.execute(
        select(Team.name, Job.status, func.count())
        .join(Team, Team.id == Job.team_id)
        .group_by(Team.name, Job.status)
    )
    return {(team, status): count for team, status, count in rows}


def charges_by_team(
    session: Session, *, start: datetime, end: datetime, team_id: str | None = None
) -> dict[str, list[Charge]]:
    """Every team's (or one team's) attempts that ran during [start, end), by team name."""
    where = [ran_during(start, end)]
    if team_id is not None:
        where.append(JobAttempt.team_id == team_id)
    return grouped_charges(session, by=Team.name, where=where)

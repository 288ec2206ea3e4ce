"""Every query about teams, and the jobs per team the metrics token may read."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.models import Job, Team


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

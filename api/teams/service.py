"""Teams and their tokens."""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import issue_token
from api.errors import Conflict, InvalidRequest
from api.models import Team
from gpujobs.resources import FieldError
from gpujobs.spec import NAME_PATTERN


def get_by_name(session: Session, *, name: str) -> Team | None:
    return session.scalars(select(Team).where(Team.name == name)).first()


def create_team(session: Session, *, name: str, is_admin: bool = False) -> tuple[Team, str]:
    """Create a team and its first token; the token is returned in clear exactly once."""
    if not re.match(NAME_PATTERN, name) or len(name) > 63:
        raise InvalidRequest(
            "invalid team name",
            fields=[FieldError(field="name", reason="lowercase letters, digits and '-', max 63")],
        )
    if get_by_name(session, name=name) is not None:
        raise Conflict(f"team {name!r} already exists")
    team = Team(name=name, is_admin=is_admin)
    session.add(team)
    session.flush()
    return team, issue_token(session, team_id=team.id, name="initial")


def create_token(session: Session, *, name: str) -> str:
    team = get_by_name(session, name=name)
    if team is None:
        raise InvalidRequest(f"no team named {name!r}")
    return issue_token(session, team_id=team.id, name="cli")

"""Teams and their first token."""

from __future__ import annotations

import re
from datetime import datetime

from sqlalchemy.orm import Session

from api.auth import Principal, issue_for
from api.errors import Conflict, InvalidRequest, NotFound
from api.models import Team, utcnow
from api.teams import repository
from gpujobs.resources import FieldError
from gpujobs.spec import NAME_PATTERN
from gpujobs.tokens import CreatedTeam, IssuedToken, TeamInfo, TeamList


def get_by_name(session: Session, *, name: str) -> Team | None:
    return repository.get_by_name(session, name=name)


def _check_name(name: str) -> None:
    if not re.match(NAME_PATTERN, name) or len(name) > 63:
        raise InvalidRequest(
            "invalid team name",
            fields=[
                FieldError(
                    field="name",
                    reason="lowercase letters, digits and '-', starting and ending with a "
                    "letter or digit, at most 63",
                )
            ],
        )


def add_team(
    session: Session,
    *,
    name: str,
    now: datetime,
    token_name: str = "initial",
    expires_in_seconds: int | None = None,
) -> tuple[Team, IssuedToken]:
    """Create a team and its first token; the token is returned in clear exactly once."""
    _check_name(name)
    taken = repository.get_by_name(session, name=name) is not None
    team = None if taken else repository.add(session, name=name)
    if team is None:
        raise Conflict(f"team {name!r} already exists")
    issued = issue_for(
        session, team=team, now=now, name=token_name, expires_in_seconds=expires_in_seconds
    )
    return team, issued


def create_team(session: Session, *, name: str) -> tuple[Team, str]:
    """A team and its first token in clear (for the operator's own tools and tests)."""
    team, issued = add_team(session, name=name, now=utcnow())
    return team, issued.token


def create_token(session: Session, *, name: str, label: str = "cli") -> str:
    team = repository.get_by_name(session, name=name)
    if team is None:
        raise NotFound(f"team {name!r} not found")
    return issue_for(session, team=team, now=utcnow(), name=label).token


def team_info(team: Team) -> TeamInfo:
    return TeamInfo(id=team.id, name=team.name, created_at=team.created_at)


def create(
    session: Session,
    *,
    principal: Principal,
    name: str,
    now: datetime,
    token_name: str = "initial",
    expires_in_seconds: int | None = None,
) -> CreatedTeam:
    principal.require_admin()
    team, issued = add_team(
        session,
        name=name,
        now=now,
        token_name=token_name or "initial",
        expires_in_seconds=expires_in_seconds,
    )
    return CreatedTeam(team=team_info(team), token=issued.token, token_info=issued.info)


def list_teams(session: Session, *, principal: Principal) -> TeamList:
    principal.require_admin()
    return TeamList(items=[team_info(team) for team in repository.all_teams(session)])

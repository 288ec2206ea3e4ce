"""Token use cases. Only the admin token manages tokens: a stolen team token must not be able to
mint more tokens or revoke its team's other ones (see docs/admin.md)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from api import auth
from api.auth import Principal
from api.errors import NotFound
from api.models import Team
from api.teams import repository as teams
from api.tokens import repository
from gpujobs.tokens import IssuedToken, TokenInfo, TokenList

MAX_LISTING = 1000


def _team(session: Session, *, name: str) -> Team:
    team = teams.get_by_name(session, name=name)
    if team is None:
        raise NotFound(f"team {name!r} not found")
    return team


def list_tokens(
    session: Session,
    *,
    principal: Principal,
    now: datetime,
    team_name: str | None = None,
    include_inactive: bool = False,
    limit: int = MAX_LISTING,
) -> TokenList:
    principal.require_admin()
    team_id = None if team_name is None else _team(session, name=team_name).id
    rows = repository.listing(
        session, team_id=team_id, include_inactive=include_inactive, now=now, limit=limit
    )
    return TokenList(
        items=[auth.token_info(token, team_name=name, now=now) for token, name in rows]
    )


def create_token(
    session: Session,
    *,
    principal: Principal,
    team_name: str,
    now: datetime,
    name: str = "",
    expires_in_seconds: int | None = None,
) -> IssuedToken:
    principal.require_admin()
    team = _team(session, name=team_name)
    return auth.issue_for(
        session, team=team, now=now, name=name, expires_in_seconds=expires_in_seconds
    )


def revoke_token(
    session: Session, *, principal: Principal, token_id: str, now: datetime
) -> TokenInfo:
    """Revoke (idempotent: a revoked token keeps its first revocation time)."""
    principal.require_admin()
    found = repository.get(session, token_id=token_id)
    if found is None:
        raise NotFound(f"token {token_id!r} not found")
    token, team_name = found
    repository.revoke(session, token=token, now=now)
    return auth.token_info(token, team_name=team_name, now=now)

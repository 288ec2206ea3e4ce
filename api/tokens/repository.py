"""Every query about stored tokens."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.models import ApiToken, Team


def get(session: Session, *, token_id: str) -> tuple[ApiToken, str] | None:
    """A token and its team's name."""
    row = session.execute(
        select(ApiToken, Team.name)
        .join(Team, Team.id == ApiToken.team_id)
        .where(ApiToken.id == token_id)
    ).first()
    return None if row is None else (row[0], row[1])


def listing(
    session: Session,
    *,
    team_id: str | None,
    include_inactive: bool,
    now: datetime,
    limit: int,
) -> list[tuple[ApiToken, str]]:
    """Tokens oldest first (ids are time-ordered), with their team's name."""
    query = select(ApiToken, Team.name).join(Team, Team.id == ApiToken.team_id)
    if team_id is not None:
        query = query.where(ApiToken.team_id == team_id)
    if not include_inactive:
        query = query.where(
            ApiToken.revoked_at.is_(None),
            or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
        )
    rows = session.execute(query.order_by(ApiToken.id).limit(limit))
    return [(token, name) for token, name in rows]


def revoke(session: Session, *, token: ApiToken, now: datetime) -> None:
    if token.revoked_at is None:
        token.revoked_at = now
        session.flush()

"""Bearer tokens: generated once, shown once, stored as SHA-256."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.errors import Forbidden, Unauthorized
from api.models import ApiToken, Team

TOKEN_PREFIX = "gpj_"


@dataclass(frozen=True)
class Principal:
    team_id: str
    team_name: str
    is_admin: bool = False
    job_id: str | None = None  # set for a trainer's job-scoped token

    def require_team_token(self) -> None:
        if self.job_id is not None:
            raise Forbidden("a job token may only report progress for its own job")

    def require_team(self) -> None:
        """Acting as a team (submitting a job): the operator's admin token belongs to none."""
        self.require_team_token()
        if not self.team_id:
            raise Forbidden("the admin token belongs to no team; use a team's token")

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("this needs an admin token")


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(
    session: Session, *, team_id: str, job_id: str | None = None, name: str = ""
) -> str:
    """Create a token and return it in clear: the only time it exists in clear."""
    token = generate_token()
    session.add(
        ApiToken(
            team_id=team_id,
            job_id=job_id,
            token_hash=hash_token(token),
            prefix=token[: len(TOKEN_PREFIX) + 4],
            name=name,
        )
    )
    return token


def authenticate(session: Session, *, authorization: str | None, admin_token: str) -> Principal:
    if not authorization:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Authorization must be 'Bearer <token>'")
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return Principal(team_id="", team_name="admin", is_admin=True)
    row = session.execute(
        select(ApiToken, Team)
        .join(Team, Team.id == ApiToken.team_id)
        .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    ).first()
    if row is None:
        raise Unauthorized("invalid or revoked token")
    api_token, team = row
    return Principal(
        team_id=team.id, team_name=team.name, is_admin=team.is_admin, job_id=api_token.job_id
    )


def revoke_job_tokens(session: Session, *, job_id: str, now: datetime) -> None:
    """A finished job's trainer has nothing left to report."""
    session.execute(
        update(ApiToken)
        .where(ApiToken.job_id == job_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )

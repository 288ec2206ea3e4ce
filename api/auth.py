"""Bearer tokens: generated once, shown once, stored as SHA-256.

Two kinds of caller: the operator, with the configured admin token (Settings.admin_token, never
stored in the database), and teams, with tokens issued to them. No team token is an admin, the
embedded default team's included. A token may expire and may be revoked; both are refused with 401.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.errors import Forbidden, Unauthorized
from api.models import ApiToken, Team, utcnow

TOKEN_PREFIX = "gpj_"
# `last_used_at` is this fresh at worst: a token used every second costs one write a minute.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    team_id: str
    team_name: str
    is_admin: bool = False
    job_id: str | None = None  # set for a trainer's job-scoped token
    token_id: str | None = None  # None for the admin token, which is not stored
    last_used_at: datetime | None = None

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
            raise Forbidden("this needs the admin token (GPUJOBS_ADMIN_TOKEN); team tokens never")


ADMIN = Principal(team_id="", team_name="admin", is_admin=True)


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(
    session: Session,
    *,
    team_id: str,
    job_id: str | None = None,
    name: str = "",
    expires_at: datetime | None = None,
) -> str:
    """Create a token and return it in clear: the only time it exists in clear."""
    return issue(session, team_id=team_id, job_id=job_id, name=name, expires_at=expires_at)[1]


def issue(
    session: Session,
    *,
    team_id: str,
    job_id: str | None = None,
    name: str = "",
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """The stored row and the token in clear."""
    token = generate_token()
    row = ApiToken(
        team_id=team_id,
        job_id=job_id,
        token_hash=hash_token(token),
        prefix=token[: len(TOKEN_PREFIX) + 4],
        name=name,
        expires_at=expires_at,
    )
    session.add(row)
    return row, token


def refusal(token: ApiToken, *, now: datetime) -> str | None:
    """Why a stored token is refused now, or None when it is good."""
    if token.revoked_at is not None:
        return f"token {token.prefix}... was revoked at {token.revoked_at.isoformat()}"
    if token.expires_at is not None and token.expires_at <= now:
        return (
            f"token {token.prefix}... expired at {token.expires_at.isoformat()}; "
            "ask an operator for a new one"
        )
    return None


def authenticate(
    session: Session,
    *,
    authorization: str | None,
    admin_token: str,
    now: datetime | None = None,
) -> Principal:
    now = now or utcnow()
    if not authorization:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Authorization must be 'Bearer <token>'")
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return ADMIN
    row = session.execute(
        select(ApiToken, Team)
        .join(Team, Team.id == ApiToken.team_id)
        .where(ApiToken.token_hash == hash_token(token))
    ).first()
    if row is None:
        raise Unauthorized("invalid token")
    api_token, team = row
    refused = refusal(api_token, now=now)
    if refused is not None:
        raise Unauthorized(refused)
    return Principal(
        team_id=team.id,
        team_name=team.name,
        job_id=api_token.job_id,
        token_id=api_token.id,
        last_used_at=api_token.last_used_at,
    )


def record_use(session: Session, *, principal: Principal, now: datetime) -> bool:
    """Note that the token was used, unless it was noted less than a minute ago. True when it
    wrote (the caller commits)."""
    if principal.token_id is None:
        return False
    stale = now - LAST_USED_RESOLUTION
    if principal.last_used_at is not None and principal.last_used_at > stale:
        return False
    # The condition is repeated in SQL so concurrent requests write once between them.
    session.execute(
        update(ApiToken)
        .where(
            ApiToken.id == principal.token_id,
            (ApiToken.last_used_at.is_(None)) | (ApiToken.last_used_at <= stale),
        )
        .values(last_used_at=now)
    )
    return True


def revoke_job_tokens(session: Session, *, job_id: str, now: datetime) -> None:
    """A finished job's trainer has nothing left to report."""
    session.execute(
        update(ApiToken)
        .where(ApiToken.job_id == job_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )

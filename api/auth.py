"""Bearer tokens: generated once, shown once, stored as SHA-256.

Two kinds of caller: the operator, with the configured admin token (Settings.admin_token, never
stored in the database), and teams, with tokens issued to them. No team token is an admin, the
embedded default team's included. A token may expire and may be revoked; both are refused with 401.

A token that authenticated is remembered for a few seconds (`PrincipalCache`), so most requests
cost no query for their caller. Expiry is still checked on every request; a revocation through
this process's API applies at once; one made elsewhere (the admin CLI, another API replica, the
worker closing a finished job's token) applies within `Settings.auth_cache_s`, as a webhook
token cache on Kubernetes' API server does.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.errors import Forbidden, Unauthorized
from api.models import ApiToken, Team, utcnow
from gpujobs.tokens import IssuedToken, TokenInfo

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
    expires_at: datetime | None = None

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
    attempt_id: str | None = None,
    name: str = "",
    expires_at: datetime | None = None,
) -> str:
    """Create a token and return it in clear: the only time it exists in clear."""
    return issue(
        session,
        team_id=team_id,
        job_id=job_id,
        attempt_id=attempt_id,
        name=name,
        expires_at=expires_at,
    )[1]


def issue(
    session: Session,
    *,
    team_id: str,
    job_id: str | None = None,
    attempt_id: str | None = None,
    name: str = "",
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """The stored row and the token in clear."""
    token = generate_token()
    row = ApiToken(
        team_id=team_id,
        job_id=job_id,
        attempt_id=attempt_id,
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
    return _expired(token.prefix, token.expires_at, now=now)


def _expired(prefix: str, expires_at: datetime | None, *, now: datetime) -> str | None:
    if expires_at is not None and expires_at <= now:
        return (
            f"token {prefix}... expired at {expires_at.isoformat()}; ask an operator for a new one"
        )
    return None


def issue_for(
    session: Session,
    *,
    team: Team,
    now: datetime,
    name: str = "",
    expires_in_seconds: int | None = None,
) -> IssuedToken:
    """A new token of the team, in clear (this once) with what its listing shows."""
    expires_at = None if expires_in_seconds is None else now + timedelta(seconds=expires_in_seconds)
    row, secret = issue(session, team_id=team.id, name=name, expires_at=expires_at)
    session.flush()
    return IssuedToken(token=secret, info=token_info(row, team_name=team.name, now=now))


def token_info(token: ApiToken, *, team_name: str, now: datetime) -> TokenInfo:
    """A stored token as its listing shows it: never its secret."""
    return TokenInfo(
        id=token.id,
        name=token.name,
        prefix=token.prefix,
        team=team_name,
        job_id=token.job_id,
        created_at=token.created_at,
        last_used_at=token.last_used_at,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
        active=refusal(token, now=now) is None,
    )


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header."""
    if not authorization:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Authorization must be 'Bearer <token>'")
    return token


def authenticate(
    session: Session,
    *,
    authorization: str | None,
    admin_token: str,
    now: datetime | None = None,
) -> Principal:
    now = now or utcnow()
    token = bearer_token(authorization)
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
        expires_at=api_token.expires_at,
    )


@dataclass(frozen=True)
class _Remembered:
    principal: Principal
    until: float  # time.monotonic()


class PrincipalCache:
    """Team and job tokens that authenticated less than `ttl_s` ago, by their SHA-256.

    Bounded: past `max_entries` the oldest entry goes. `ttl_s` = 0 remembers nothing."""

    def __init__(self, ttl_s: float, *, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, _Remembered] = {}
        self._lock = threading.Lock()
        # Bumped by clear(): a lookup that began before a revocation must not be remembered.
        self.generation = 0

    def get(self, token: str, *, now: datetime) -> Principal | None:
        """The remembered principal; Unauthorized when its token expired since."""
        key = hash_token(token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.until <= time.monotonic():
            self._entries.pop(key, None)
            return None
        principal = entry.principal
        expired = _expired(token[: len(TOKEN_PREFIX) + 4], principal.expires_at, now=now)
        if expired is not None:
            raise Unauthorized(expired)
        return principal

    def put(self, token: str, principal: Principal, *, generation: int) -> None:
        """Remember a lookup that began at `generation` (read before the query)."""
        if self.ttl_s <= 0 or principal.token_id is None:
            return  # the admin token is compared, never looked up
        with self._lock:
            if generation != self.generation:
                return  # a revocation came in meanwhile: what was read may be stale
            self._entries[hash_token(token)] = _Remembered(principal, time.monotonic() + self.ttl_s)
            while len(self._entries) > self.max_entries:
                del self._entries[next(iter(self._entries))]

    def used(self, token: str, principal: Principal, *, at: datetime) -> Principal:
        """After recording a use: remember it, so the next request does not write again."""
        updated = replace(principal, last_used_at=at)
        key = hash_token(token)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries[key] = replace(entry, principal=updated)
        return updated

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self._entries.clear()


def use_is_stale(principal: Principal, *, now: datetime) -> bool:
    """Whether the token's last use is older than the resolution we record it at."""
    if principal.token_id is None:
        return False
    return principal.last_used_at is None or principal.last_used_at <= now - LAST_USED_RESOLUTION


def record_use(session: Session, *, principal: Principal, now: datetime) -> bool:
    """Note that the token was used, unless it was noted less than a minute ago. True when it
    wrote (the caller commits)."""
    if not use_is_stale(principal, now=now):
        return False
    stale = now - LAST_USED_RESOLUTION
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


def revoke_attempt_tokens(session: Session, *, attempt_id: str, now: datetime) -> None:
    """An ended attempt's trainer has nothing left to report: a process of it that outlives
    the attempt (a released one still writing, a preempted one slow to stop) is refused."""
    session.execute(
        update(ApiToken)
        .where(ApiToken.attempt_id == attempt_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )


def revoke_job_tokens(session: Session, *, job_id: str, now: datetime) -> None:
    """A finished job's trainer has nothing left to report."""
    session.execute(
        update(ApiToken)
        .where(ApiToken.job_id == job_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )

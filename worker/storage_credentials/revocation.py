"""Credentials outlive no attempt: each reconciling pass revokes those whose attempt has ended.

A sweep rather than a call where an attempt closes: an attempt ends in many places (observed
end, cancel, a launch given up, a refused launch) and a worker can die between closing it and
revoking; the next pass, by any worker, still revokes.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.database import read_session
from api.models import JobAttempt
from worker.storage_credentials import StorageCredentials

log = logging.getLogger(__name__)


def to_revoke(*, issued: list[str], open_attempts: set[str]) -> list[str]:
    """The attempts holding keys that are not open: ended, or gone from the database."""
    return sorted(set(issued) - open_attempts)


def revoke_ended(*, storage: StorageCredentials, factory: sessionmaker[Session]) -> int:
    """Returns how many attempts' keys were revoked."""
    # Who holds keys first, then who is open: a key minted between the two reads belongs to an
    # attempt open at the second, so it is never taken from a launching attempt.
    issued = storage.issued()
    if not issued:
        return 0
    with read_session(factory) as session:
        still_open = set(
            session.scalars(
                select(JobAttempt.id).where(
                    JobAttempt.id.in_(issued), JobAttempt.ended_at.is_(None)
                )
            )
        )
    revoked = 0
    for attempt_id in to_revoke(issued=issued, open_attempts=still_open):
        try:
            storage.revoke(attempt_id=attempt_id)
            revoked += 1
        except Exception:
            log.exception("revoking the keys of attempt %s failed; next pass retries", attempt_id)
    return revoked

"""Credentials outlive no attempt: reconciling passes revoke those whose attempt has ended.

A sweep rather than a call where an attempt closes: an attempt ends in many places (observed
end, cancel, a launch given up, a refused launch) and a worker can die between closing it and
revoking; the next sweep, by any worker, still revokes.

Revoking an attempt's keys also aborts the multipart uploads it left unfinished under its job's
prefix (left_uploads.py): its own keys may not list them.

A sweep lists every IAM user, so it is paced (`Pace`): a worker sweeps at its first pass, after
any attempt has ended since its last sweep began, after a sweep that failed to revoke, and
otherwise every `storage_revoke_interval_s`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import exists, select
from sqlalchemy.orm import Session, sessionmaker

from api.database import read_session
from api.models import Job, JobAttempt
from worker.storage_credentials import StorageCredentials
from worker.storage_credentials.left_uploads import Lifetime, dead_before

log = logging.getLogger(__name__)


def to_revoke(*, issued: list[str], open_attempts: set[str]) -> list[str]:
    """The attempts holding keys that are not open: ended, or gone from the database."""
    return sorted(set(issued) - open_attempts)


def sweep_due(
    *, last: datetime | None, failed: bool, ended_since: bool, now: datetime, interval_s: float
) -> bool:
    """Whether to list the users now. `last`: when this worker's last sweep began (None: it
    has not swept yet, and another worker may have died holding keys); `failed`: that sweep
    left keys it could not revoke; `ended_since`: an attempt has ended since `last`."""
    if last is None or failed or ended_since:
        return True
    return now - last >= timedelta(seconds=interval_s)


@dataclass
class Pace:
    """One worker's sweeps: when the last one began, and whether it revoked all it should."""

    last: datetime | None = None
    failed: bool = False


def revoke_ended(
    *,
    storage: StorageCredentials,
    factory: sessionmaker[Session],
    pace: Pace,
    now: datetime,
    interval_s: float,
) -> int | None:
    """Returns how many attempts' keys were revoked; None when no sweep was due."""
    ended_since = False
    if pace.last is not None and not pace.failed:
        # After, not at: this pass's own closes come before its sweep, at its time or before.
        # One another worker dates to the very instant the sweep began, after its reads, waits
        # for the interval.
        with read_session(factory) as session:
            ended_since = bool(
                session.scalar(select(exists().where(JobAttempt.ended_at > pace.last)))
            )
    due = sweep_due(
        last=pace.last, failed=pace.failed, ended_since=ended_since, now=now, interval_s=interval_s
    )
    if not due:
        return None
    # Marked before listing: an attempt that ends from here on, or a sweep that raises, makes
    # the next pass sweep.
    pace.last, pace.failed = now, True
    revoked = _sweep(storage=storage, factory=factory)
    pace.failed = revoked is None
    return revoked or 0


def _sweep(*, storage: StorageCredentials, factory: sessionmaker[Session]) -> int | None:
    """How many attempts' keys were revoked; None when some could not be."""
    # Who holds keys first, then who is open: a key minted between the two reads belongs to an
    # attempt open at the second, so it is never taken from a launching attempt.
    issued = storage.issued()
    if not issued:
        return 0
    with read_session(factory) as session:
        rows = session.execute(
            select(
                JobAttempt.id, JobAttempt.job_id, JobAttempt.created_at, JobAttempt.ended_at,
                Job.checkpoint_uri,
            )
            .join(Job, Job.id == JobAttempt.job_id)
            .where(JobAttempt.id.in_(issued))
        ).all()  # fmt: skip
        siblings: dict[str, list[tuple[str, Lifetime]]] = {}
        for job_id, attempt_id, created_at, ended_at in session.execute(
            select(JobAttempt.job_id, JobAttempt.id, JobAttempt.created_at, JobAttempt.ended_at)
            .where(JobAttempt.job_id.in_({row.job_id for row in rows if row.ended_at}))
        ):  # fmt: skip
            siblings.setdefault(job_id, []).append((attempt_id, Lifetime(created_at, ended_at)))
    still_open = {row.id for row in rows if row.ended_at is None}
    # Where an ended attempt may have left unfinished uploads, and before when every upload
    # there is a dead attempt's (not the primary's a standby stood beside, not the next's).
    ended = {
        row.id: (
            row.checkpoint_uri,
            dead_before(
                Lifetime(row.created_at, row.ended_at),
                (life for other, life in siblings.get(row.job_id, []) if other != row.id),
            ),
        )
        for row in rows
        if row.ended_at
    }
    revoked, failed = 0, False
    for attempt_id in to_revoke(issued=issued, open_attempts=still_open):
        checkpoint_uri, ended_at = ended.get(attempt_id, (None, None))
        try:
            storage.revoke(attempt_id=attempt_id, checkpoint_uri=checkpoint_uri, ended_at=ended_at)
            revoked += 1
        except Exception:
            failed = True
            log.exception("revoking the keys of attempt %s failed; next pass retries", attempt_id)
    return None if failed else revoked

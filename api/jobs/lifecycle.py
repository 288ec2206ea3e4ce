"""The only place a job's status changes. Every change is legal and leaves an event behind.

    PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
    RUNNING -> PREEMPTED -> PENDING

plus the edges real life needs: a placement that never started goes back to PENDING (no capacity)
or is preempted before it ran; a failure with restarts left goes back to PENDING; any live job can
be cancelled; the scheduler can fail a job it must reject.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from api.auth import revoke_job_tokens
from api.errors import IllegalTransition
from api.models import Job, JobEvent, utcnow
from gpujobs.resources import JobStatus
from gpujobs.runtime import TERMINATION_MESSAGE_MAX_BYTES

S = JobStatus
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.PENDING: frozenset({S.SCHEDULED, S.FAILED, S.CANCELLED}),
    S.SCHEDULED: frozenset({S.RUNNING, S.PENDING, S.PREEMPTED, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.PENDING}),
    S.PREEMPTED: frozenset({S.PENDING, S.CANCELLED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}
# A reason may quote a trainer (its termination message, its last lines): a team's code, as
# long as it likes, and every read of the job and its events returns it. Room for a whole
# termination message (Kubernetes' limit) and the words around it; whatever a launcher says.
REASON_MAX_CHARS = TERMINATION_MESSAGE_MAX_BYTES + 1024
REASON_END_CHARS = 256  # kept after a cut: "; restart 1 of 3"


def can_switch(current: JobStatus, to: JobStatus) -> bool:
    return to in TRANSITIONS[current]


def switch_status(
    session: Session,
    job: Job,
    to: JobStatus,
    *,
    reason: str | None = None,
    data: dict[str, Any] | None = None,
) -> bool:
    """Move `job` to `to` and record the event in the caller's transaction.

    Idempotent: switching to the status the job already has changes nothing and returns False.
    An illegal change raises `IllegalTransition` and writes nothing.
    """
    current = JobStatus(job.status)
    if current == to:
        return False
    if not can_switch(current, to):
        raise IllegalTransition(f"job {job.id} cannot go from {current} to {to}")
    now = utcnow()
    reason = capped_reason(reason)
    job.status = to.value
    job.status_reason = reason
    job.updated_at = now
    session.add(
        JobEvent(
            job_id=job.id,
            at=now,
            from_status=current.value,
            to_status=to.value,
            reason=reason,
            data=data or {},
        )
    )
    if to.terminal:
        # An ended job's trainers have nothing left to report, whichever path ended it.
        revoke_job_tokens(session, job_id=job.id, now=now)
    return True


def capped_reason(reason: str | None) -> str | None:
    """At most REASON_MAX_CHARS: a long reason loses its middle, and says how much."""
    if reason is None or len(reason) <= REASON_MAX_CHARS:
        return reason
    longest_marker = len(f" [... {len(reason)} characters cut ...] ")
    head = REASON_MAX_CHARS - REASON_END_CHARS - longest_marker
    cut = len(reason) - head - REASON_END_CHARS
    return f"{reason[:head]} [... {cut} characters cut ...] {reason[-REASON_END_CHARS:]}"


def note(session: Session, job: Job, *, reason: str, data: dict[str, Any] | None = None) -> None:
    """An event that changes no status (a standby held beside the running attempt, a handover):
    from and to are the job's status. The status and its reason stay as they are."""
    session.add(
        JobEvent(
            job_id=job.id,
            at=utcnow(),
            from_status=job.status,
            to_status=job.status,
            reason=capped_reason(reason),
            data=data or {},
        )
    )


def record_created(session: Session, job: Job, *, data: dict[str, Any] | None = None) -> None:
    """The first event of every job: it appeared as PENDING."""
    session.add(
        JobEvent(
            job_id=job.id,
            at=job.created_at,
            from_status=None,
            to_status=JobStatus.PENDING.value,
            reason="submitted",
            data=data or {},
        )
    )

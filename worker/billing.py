"""Closing an attempt puts it on the ledger: what it cost, and what its job lost with it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from api import metrics
from api import progress as stored_progress
from api.auth import revoke_attempt_tokens
from api.models import AttemptRole, Job, JobAttempt
from api.money import MICRO, cost_microusd
from gpujobs.reasons import EndReason


def close(
    session: Session, *, attempt: JobAttempt, job: Job | None, now: datetime, end_reason: EndReason
) -> None:
    """End the attempt and put it on the ledger: cost = price x the time it held capacity.
    Its job token goes with it."""
    attempt.ended_at = now
    attempt.end_reason = end_reason
    revoke_attempt_tokens(session, attempt_id=attempt.id, now=now)
    started = attempt.started_at
    attempt.cost_microusd = (
        cost_microusd(price_per_hour=attempt.price_per_hour, started_at=started, ended_at=now)
        if started is not None and started < now
        else 0
    )
    metrics.record_dollars(attempt.cost_microusd / MICRO)
    if attempt.role is AttemptRole.STANDBY:
        return  # never the job's attempt: the job's steps are not its to lose
    progress = stored_progress.read_or_none(job.progress) if job else None
    step = progress.step if progress else None
    checkpoint = job.resume_from_step if job else None
    if step is not None:
        attempt.end_step = step
        attempt.steps_lost = max(0, step - (checkpoint or 0))


def ending(attempt: JobAttempt, job: Job) -> dict[str, object]:
    """What a person watching wants to read of a closed attempt on its job's event: "preempted
    at step 32, resuming from 30"."""
    data: dict[str, object] = {"attempt_id": attempt.id, "attempt": attempt.number}
    if attempt.end_reason:
        data["end_reason"] = attempt.end_reason
    if attempt.end_step is not None:
        data["step"] = attempt.end_step
    if attempt.steps_lost is not None:
        data["steps_lost"] = attempt.steps_lost
    if job.resume_from_step is not None:
        data["resume_from_step"] = job.resume_from_step
    return data

"""Queries placement needs that no other repository answers: what the service observed of spot,
which spot offers preempted a job before its first checkpoint, and what a team's earlier jobs
measured of their checkpoints and of their speed on each GPU."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from api.models import AttemptRole, Job, JobAttempt
from api.placement.learning import SpotAttempt
from gpujobs.progress import MAX_CHECKPOINT_STALL_S
from gpujobs.reasons import EndReason


def spot_attempts(session: Session, *, since: datetime) -> dict[tuple[str, str], list[SpotAttempt]]:
    """Per (zone, instance type): the spot attempts asked for since `since` or still open then,
    in one query (what the service saw of each pool: learning.pool_history)."""
    rows = session.execute(
        select(
            JobAttempt.zone,
            JobAttempt.instance_type,
            JobAttempt.created_at,
            JobAttempt.started_at,
            JobAttempt.ended_at,
            JobAttempt.end_reason,
        ).where(
            JobAttempt.capacity_type == "spot",
            or_(
                JobAttempt.created_at >= since,
                JobAttempt.ended_at.is_(None),
                JobAttempt.ended_at >= since,
            ),
        )
    )
    found: dict[tuple[str, str], list[SpotAttempt]] = {}
    for zone, kind, created, started, ended, reason in rows:
        found.setdefault((zone, kind), []).append(SpotAttempt(created, started, ended, reason))
    return found


def learned_checkpoint_costs(
    session: Session, *, keys: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], float]:
    """Per (team id, checkpoint key): the checkpoint stall the team's latest job of that key
    measured; absent when none has. One indexed read per key. A stall out of the bounds a
    report is held to (a row written before they held) measured nothing: an earlier one
    stands, as if it had never been reported."""
    found: dict[tuple[str, str], float] = {}
    for team_id, key in sorted(set(keys)):
        stall = session.scalar(
            select(Job.checkpoint_stall_s)
            .where(
                Job.team_id == team_id,
                Job.checkpoint_key == key,
                Job.checkpoint_stall_s > 0,
                Job.checkpoint_stall_s <= MAX_CHECKPOINT_STALL_S,
            )
            .order_by(Job.created_at.desc(), Job.id.desc())
            .limit(1)
        )
        if stall is not None and math.isfinite(stall):
            found[(team_id, key)] = stall
    return found


# Jobs read per (team, trainer): the latest rate of each GPU model is among the newest few, and
# a sweep of many runs of one trainer must not make every scheduling pass read them all.
RATE_JOBS = 32


def learned_gpu_rates(
    session: Session, *, keys: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, float]]:
    """Per (team id, throughput key): the rate (samples a second) the newest attempt on each
    GPU model (lower-cased) among the team's latest RATE_JOBS jobs of the key measured; absent
    when none has. One read per key, bounded by the jobs index."""
    found: dict[tuple[str, str], dict[str, float]] = {}
    for team_id, key in sorted(set(keys)):
        latest = (
            select(Job.id)
            .where(Job.team_id == team_id, Job.throughput_key == key)
            .order_by(Job.created_at.desc())
            .limit(RATE_JOBS)
            .scalar_subquery()
        )
        rows = session.execute(
            select(JobAttempt.gpu_model, JobAttempt.samples_per_s)
            .where(JobAttempt.job_id.in_(latest), JobAttempt.samples_per_s.is_not(None))
            .order_by(JobAttempt.created_at.desc(), JobAttempt.id.desc())
        )
        rates: dict[str, float] = {}
        for model, rate in rows:
            if rate is not None and rate > 0:
                rates.setdefault(model.lower(), float(rate))
        if rates:
            found[(team_id, key)] = rates
    return found


def preempted_before_checkpoint(session: Session, *, job_ids: list[str]) -> dict[str, list[str]]:
    """Per job: the spot offers (keys) whose attempts were preempted with no checkpoint since
    they began (the job's resume step is still where the attempt started)."""
    if not job_ids:
        return {}
    attempts = session.scalars(
        select(JobAttempt)
        .join(Job, Job.id == JobAttempt.job_id)
        .where(
            JobAttempt.job_id.in_(job_ids),
            JobAttempt.end_reason == EndReason.PREEMPTED,
            JobAttempt.capacity_type == "spot",
            JobAttempt.role == AttemptRole.PRIMARY,  # a standby lost costs the job nothing
            func.coalesce(JobAttempt.resume_from_step, 0) >= func.coalesce(Job.resume_from_step, 0),
        )
        .order_by(JobAttempt.number)
    )
    found: dict[str, list[str]] = {}
    for attempt in attempts:
        found.setdefault(attempt.job_id, []).append(attempt.placement.offer_key)
    return found


# How a standby that will fail again ends (not a preemption nor no capacity: the pool's own).
STANDBY_FAILURES = (EndReason.FAILED, EndReason.STANDBY_STUCK)


def failed_standbys(
    session: Session, *, job_ids: list[str], withdrawn_since: datetime | None = None
) -> dict[str, list[str]]:
    """Per job: the spot offers (keys) where a standby of it failed or never waited, and where
    one withdrawn has ended since `withdrawn_since`."""
    if not job_ids:
        return {}
    ended: ColumnElement[bool] = JobAttempt.end_reason.in_(STANDBY_FAILURES)
    if withdrawn_since is not None:
        ended = or_(
            ended,
            and_(
                JobAttempt.end_reason == EndReason.WITHDRAWN,
                JobAttempt.ended_at >= withdrawn_since,
            ),
        )
    attempts = session.scalars(
        select(JobAttempt).where(
            JobAttempt.job_id.in_(job_ids), JobAttempt.role == AttemptRole.STANDBY, ended
        )
    )
    found: dict[str, list[str]] = {}
    for attempt in attempts:
        found.setdefault(attempt.job_id, []).append(attempt.placement.offer_key)
    return found

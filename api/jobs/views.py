"""Database rows -> the contract's resources."""

from __future__ import annotations

from typing import Any

from api.jobs.service import Spend
from api.models import AttemptRole, Job, JobAttempt, JobEvent
from api.money import MICRO
from gpujobs import resources as r
from gpujobs.spec import CapacityType, JobSpec


def job(row: Job, spend: Spend, *, team_name: str) -> r.Job:
    return r.Job(
        id=row.id,
        team=team_name,
        name=row.name,
        status=r.JobStatus(row.status),
        status_reason=row.status_reason,
        spec=JobSpec.from_stored(row.spec),
        created_at=row.created_at,
        updated_at=row.updated_at,
        deadline_at=row.deadline_at,
        restarts=row.restarts,
        preemptions=row.preemptions,
        attempts=row.attempts_count,
        resume_from_step=row.resume_from_step,
        progress=r.Progress.model_validate(row.progress) if row.progress else None,
        quote=quote(row),
        placement=None if spend.latest is None else placement(spend.latest),
        cost_microusd=spend.cost_microusd,
    )


def placement(row: JobAttempt) -> r.Placement:
    return r.Placement(attempt=row.number, **_where(row))


def _where(row: JobAttempt) -> dict[str, Any]:
    """Where and when an attempt runs: the fields a Placement and a JobAttempt share."""
    return {
        "cloud": row.cloud,
        "region": row.region,
        "zone": row.zone,
        "instance_type": row.instance_type,
        "gpu_model": row.gpu_model,
        "gpu_count": row.gpu_count,
        "nodes": row.nodes,
        "capacity_type": CapacityType(row.capacity_type),
        "price_per_hour": row.price_per_hour,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
    }


def quote(row: Job) -> r.Quote | None:
    if (
        row.quote_cost_microusd is None
        or row.quote_hold_microusd is None
        or row.quote_finish_at is None
    ):
        return None
    return r.Quote(
        expected_cost=row.quote_cost_microusd / MICRO,
        typical_cost=(
            None if row.quote_typical_microusd is None else row.quote_typical_microusd / MICRO
        ),
        hold_cost=row.quote_hold_microusd / MICRO,
        expected_finish=row.quote_finish_at,
        p_meet_deadline=row.quote_p_meet if row.quote_p_meet is not None else 1.0,
    )


def attempt(row: JobAttempt) -> r.JobAttempt:
    return r.JobAttempt(
        id=row.id,
        job_id=row.job_id,
        number=row.number,
        **_where(row),
        reservation_id=row.reservation_id,
        end_reason=row.end_reason,
        cost=None if row.cost_microusd is None else row.cost_microusd / MICRO,
        resume_from_step=row.resume_from_step,
        steps_lost=row.steps_lost,
        samples_per_s=row.samples_per_s,
        standby=row.role is AttemptRole.STANDBY,
        created_at=row.created_at,
    )


def event(row: JobEvent) -> r.JobEvent:
    return r.JobEvent(
        id=row.id,
        job_id=row.job_id,
        at=row.at,
        from_status=None if row.from_status is None else r.JobStatus(row.from_status),
        to_status=r.JobStatus(row.to_status),
        reason=row.reason,
        data=row.data or {},
    )

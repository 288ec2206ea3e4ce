"""decide()'s view of jobs from their rows; the rest of the snapshot is api.placement.world's."""

from __future__ import annotations

from collections.abc import Mapping

from api.models import Job, JobAttempt
from api.money import MICRO
from api.placement.checkpoints import checkpoint_cost
from api.placement.snapshot import (
    Current,
    JobState,
    measured_pace,
    samples_per_step,
    step_seconds,
)
from api.placement.throughput import learned_speeds
from gpujobs.spec import JobSpec

# Used when a spec gives no estimate and the trainer has not yet reported a rate.
DEFAULT_ESTIMATED_HOURS = 1.0


def remaining_hours(job: Job, spec: JobSpec, speeds: Mapping[str, float] | None = None) -> float:
    """Work left, in hours on the spec's reference GPU (api.pricing.gpu_speed).

    Counted from the last complete checkpoint (work after it is lost on a preemption). The
    trainer's measured rate wins over the spec's estimate once it has reported one; it was
    measured on the reporting attempt's GPU, so `speeds` converts it.
    """
    progress = job.progress or {}
    total = progress.get("total_steps") or spec.trainer.steps
    done = job.resume_from_step or 0
    rate = progress.get("samples_per_s")
    if total and rate and rate > 0:
        steps_per_hour = rate / samples_per_step(spec) * 3600.0
        hours = float((total - done) / steps_per_hour)
        return max(0.0, hours * measured_pace(spec, progress, speeds or {}))
    estimate = spec.estimated_hours or DEFAULT_ESTIMATED_HOURS
    if total:
        return estimate * max(0.0, 1.0 - done / total)
    return estimate


def job_state(
    job: Job,
    attempt: JobAttempt | None = None,
    *,
    learned_checkpoint_cost: float | None = None,
    speeds: Mapping[str, float] | None = None,
    measured_rates: Mapping[str, float] | None = None,
) -> JobState:
    """`learned_checkpoint_cost`: what the team's earlier job of the same trainer measured of a
    checkpoint, used until this job's trainer has measured its own; `speeds`: the snapshot's
    GPU speeds, which convert a rate measured on one GPU model to the spec's reference;
    `measured_rates`: what the team's attempts of the same trainer measured on each model
    (api.placement.throughput), which replace the table's figures for this job."""
    spec = JobSpec.from_stored(job.spec)
    # None unless the measures change the table: a job with its own speeds is ranked anew.
    own = learned_speeds(speeds or {}, measured_rates) if measured_rates else None
    speeds = own or speeds
    current = None
    if attempt is not None:
        placement = attempt.placement
        current = Current(
            offer_key=placement.offer_key,
            capacity_type=placement.capacity_type,
            started_at=attempt.started_at or attempt.created_at,
            reservation_id=placement.reservation_id,
        )
    return JobState(
        id=job.id,
        team=job.team_id,
        spec=spec,
        submitted_at=job.created_at,
        deadline_at=job.deadline_at,
        remaining_hours=remaining_hours(job, spec, speeds),
        state="running" if attempt is not None else "pending",
        current=current,
        preemptions=job.preemptions,
        restarts=job.restarts,
        team_name=job.team.name if job.team is not None else None,
        checkpoint_cost_seconds=checkpoint_cost(job.checkpoint_stall_s, learned_checkpoint_cost),
        step_seconds=step_seconds(spec, job.progress, speeds),
        quote_usd=None if job.quote_hold_microusd is None else job.quote_hold_microusd / MICRO,
        budget_held=job.holds_budget,
        gpu_speeds=own,
    )

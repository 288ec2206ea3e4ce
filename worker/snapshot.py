"""Build decide()'s snapshot from the database: jobs, offers, availability, learned rates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from api.models import Job, JobAttempt, SpotObservation
from api.placement.snapshot import JobState, Placement, Reservation, Snapshot
from api.pricing.catalog import Catalog
from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors, posterior_rate
from gpujobs.spec import CapacityType, JobSpec

# Used when a spec gives no estimate and the trainer has not yet reported a rate.
DEFAULT_ESTIMATED_HOURS = 1.0


def offer_key(attempt: JobAttempt) -> str:
    return (
        f"{attempt.cloud}:{attempt.zone}:{attempt.instance_type}:"
        f"{attempt.gpu_model}x{attempt.gpu_count}"
    )


def remaining_hours(job: Job, spec: JobSpec) -> float:
    """Work left, in hours on the requested resources.

    Counted from the last complete checkpoint (work after it is lost on a preemption). The
    trainer's measured rate wins over the spec's estimate once it has reported one.
    """
    progress = job.progress or {}
    total = progress.get("total_steps") or spec.trainer.steps
    done = job.resume_from_step or 0
    rate = progress.get("samples_per_s")
    if total and rate and rate > 0:
        samples_per_step = spec.trainer.batch_size * spec.trainer.grad_accum_steps
        steps_per_hour = rate / samples_per_step * 3600.0
        return max(0.0, (total - done) / steps_per_hour)
    estimate = spec.estimated_hours or DEFAULT_ESTIMATED_HOURS
    if total:
        return estimate * max(0.0, 1.0 - done / total)
    return estimate


def job_state(job: Job, attempt: JobAttempt | None = None) -> JobState:
    spec = JobSpec.from_stored(job.spec)
    placement = None
    if attempt is not None:
        placement = Placement(
            offer_key=offer_key(attempt),
            capacity_type=CapacityType(attempt.capacity_type),
            started_at=attempt.started_at or attempt.created_at,
            reservation_id=attempt.reservation_id,
        )
    return JobState(
        id=job.id,
        team=job.team_id,
        spec=spec,
        submitted_at=job.created_at,
        deadline_at=job.deadline_at,
        remaining_hours=remaining_hours(job, spec),
        state="running" if attempt is not None else "pending",
        placement=placement,
        preemptions=job.preemptions,
        restarts=job.restarts,
        checkpoint_cost_seconds=float((job.progress or {}).get("checkpoint_stall_s") or 30.0),
    )


def learned_rates(
    observations: Iterable[SpotObservation], *, priors: Priors, regions: Mapping[str, str]
) -> dict[tuple[str, str], PreemptionPrior]:
    """Per (zone, instance type): the prior updated with what this service has seen."""
    rates = {}
    for row in observations:
        if row.preemptions == 0 and row.spot_seconds <= 0:
            continue
        prior = priors.lookup(
            zone=row.zone, region=regions.get(row.zone, ""), instance_type=row.instance_type
        )
        rates[(row.zone, row.instance_type)] = posterior_rate(
            prior, row.preemptions, row.spot_seconds / 3600.0
        )
    return rates


def unavailable(
    outages: frozenset[tuple[str, str, CapacityType]],
    *,
    offers: Iterable[Offer],
    spot_available: bool | None,
) -> frozenset[tuple[str, str, CapacityType]]:
    """Capacity known to be gone: recent no-capacity answers, or the launcher's own spot market."""
    if spot_available is False:
        return outages | {
            (o.zone, o.instance_type, CapacityType.SPOT) for o in offers if o.spot_price
        }
    return outages


def build(
    *,
    now: datetime,
    jobs: list[JobState],
    catalog: Catalog,
    priors: Priors,
    observations: list[SpotObservation],
    outages: frozenset[tuple[str, str, CapacityType]],
    reservations: list[Reservation],
    budgets: Mapping[str, float | None],
    spot_available: bool | None,
    restart_hours: float,
    step_hours: float,
) -> Snapshot:
    regions = {offer.zone: offer.region for offer in catalog.offers}
    return Snapshot(
        now=now,
        jobs=jobs,
        offers=catalog.offers,
        unavailable=unavailable(outages, offers=catalog.offers, spot_available=spot_available),
        reservations=reservations,
        budgets=budgets,
        priors=priors,
        rates=learned_rates(observations, priors=priors, regions=regions),
        restart_hours=restart_hours,
        step_hours=step_hours,
    )

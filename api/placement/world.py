"""The snapshot decide() sees, from the database: one builder for the scheduler, the estimate
and admission, so that all three weigh the same jobs' measures (checkpoint cost, speeds), learned
rates, restart and reaction time, reservations, budgets and capacity known gone.

The scheduler gives it what only the worker knows: the jobs it claimed, and its launcher's spot
market (`spot_available`). The estimate and admission weigh one spec alone (`jobs=[]`) and know
no launcher: api cannot call the worker's probe, and the worker records none, so for them only
capacity known gone from the database (no_capacity) stands for it."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from api import progress as stored_progress
from api.catalog.repository import no_capacity
from api.models import AttemptRole, Job, JobAttempt
from api.money import MICRO
from api.placement import repository
from api.placement import snapshot as snapshots
from api.placement.checkpoints import checkpoint_cost
from api.placement.learning import PoolHistory, pool_history
from api.placement.snapshot import Current, JobState, Reservation, Snapshot, step_seconds
from api.placement.states import Calibration, Measured, remaining_hours
from api.placement.throughput import several_models
from api.placement.trainer_keys import trainer_keys
from api.pricing.catalog import Catalog
from api.pricing.gpu_speed import Speeds, normalized
from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors
from api.reservations import repository as reservation_rows
from api.settings import Settings
from gpujobs import progress as progress_bounds
from gpujobs.spec import CapacityType, JobSpec

log = logging.getLogger(__name__)

Unavailable = frozenset[tuple[str, str, CapacityType]]


Histories = Mapping[tuple[str, str], PoolHistory]
# What the service saw of a pool longer ago than this says little about it now: a pool's
# preemption rate and availability drift over days (in the traces, us-west-2c's p3.2xlarge kept
# spot 6.8 h on average through February 2023, 2.7 h over all its records), so the prior plus
# the last week decides.
OBSERVATION_WINDOW = timedelta(days=7)
# Within the window, older evidence weighs less in what decide() judges by (learning.pool_history's
# half_life): a pool seen poor a day ago drifts back to its prior, so the rule that holds a
# standby tries it again, where the whole week kept it on on-demand for good. 12 h is the only
# half-life measured cheaper than the week alike in every trace set (benchmarks/spot/half_life.py;
# a day or more gains little). The quote forecasts the job's whole run and reads the whole
# window alike (Snapshot.forecast_rates): weighed by age it overquoted (quote calibration's
# median error 0.21 against 0.12, both with the plain median of the runs as the likely cost).
EVIDENCE_HALF_LIFE: timedelta | None = timedelta(hours=12)


def learned_rates(
    histories: Histories,
    *,
    priors: Priors,
    regions: Mapping[str, str],
    clouds: Mapping[str, str] | None = None,
) -> dict[tuple[str, str], PreemptionPrior]:
    """Per spot pool (zone, instance type): its hierarchical prior updated with what this
    service saw of it (learning.py): preemptions per spot-hour and outages."""
    clouds = clouds or {}
    rates = {}
    for (zone, instance_type), seen in histories.items():
        if seen.empty:
            continue
        prior = priors.lookup(
            zone=zone,
            region=regions.get(zone, ""),
            instance_type=instance_type,
            cloud=clouds.get(zone, ""),
        )
        rates[(zone, instance_type)] = seen.posterior(prior)
    return rates


def pool_histories(
    session: Session, *, now: datetime
) -> tuple[dict[tuple[str, str], PoolHistory], dict[tuple[str, str], PoolHistory]]:
    """Every spot pool's history over the observation window, from its attempts (one query):
    weighed by age (decide()'s) and every sight alike (the quote's forecast)."""
    since = now - OBSERVATION_WINDOW
    attempts = repository.spot_attempts(session, since=since)
    recent = {
        pool: pool_history(seen, since=since, now=now, half_life=EVIDENCE_HALF_LIFE)
        for pool, seen in attempts.items()
    }
    window = {pool: pool_history(seen, since=since, now=now) for pool, seen in attempts.items()}
    return recent, window


def with_usage(session: Session, *, now: datetime) -> list[Reservation]:
    """The reservations in force at `now` as decide() sees them, with the nodes in use."""
    used = reservation_rows.in_use(session)
    return [
        Reservation(
            id=row.id,
            instance_type=row.instance_type,
            zone=row.zone,
            count=row.count,
            in_use=used.get(row.id, 0),
            price_per_hour=row.price_per_hour,
        )
        for row in reservation_rows.active(session, now=now)
    ]


def unavailable(
    outages: Unavailable, *, offers: Iterable[Offer], spot_available: bool | None
) -> Unavailable:
    """Capacity known to be gone: recent no-capacity answers, or the launcher's own spot market."""
    if spot_available is False:
        return outages | {
            (o.zone, o.instance_type, CapacityType.SPOT) for o in offers if o.spot_price
        }
    return outages


def build(
    *,
    now: datetime,
    jobs: Sequence[JobState],
    catalog: Catalog,
    priors: Priors,
    histories: Histories,
    outages: Unavailable,
    reservations: Sequence[Reservation],
    budgets: Mapping[str, float | None],
    spot_available: bool | None,
    calibration: Calibration,
    standby: bool = False,
    forecast_histories: Histories | None = None,
) -> Snapshot:
    regions = {offer.zone: offer.region for offer in catalog.offers}
    clouds = {offer.zone: offer.cloud for offer in catalog.offers}
    return Snapshot(
        now=now,
        jobs=jobs,
        offers=catalog.offers,
        unavailable=unavailable(outages, offers=catalog.offers, spot_available=spot_available),
        reservations=reservations,
        budgets=budgets,
        priors=priors,
        rates=learned_rates(histories, priors=priors, regions=regions, clouds=clouds),
        forecast_rates=None
        if forecast_histories is None
        else learned_rates(forecast_histories, priors=priors, regions=regions, clouds=clouds),
        restart_hours=calibration.restart_hours,
        step_hours=calibration.step_hours,
        gpu_speeds=normalized(calibration.gpu_speeds),
        standby=standby,
        time_scale=calibration.time_scale,
    )


def snapshot(
    session: Session,
    *,
    now: datetime,
    jobs: Sequence[JobState],
    catalog: Catalog,
    priors: Priors,
    budgets: Mapping[str, float | None],
    calibration: Calibration,
    spot_available: bool | None = None,
    reservations: Sequence[Reservation] | None = None,
    standby: bool = False,
) -> Snapshot:
    """The scheduler's view of the world now, read from the database; `jobs` from job_states
    (the scheduler) or prospective (a spec weighed before submit); `standby`: running jobs may
    hold a standby beside them (the launcher can, and the operator allows it)."""
    recent, window = pool_histories(session, now=now)
    return build(
        now=now,
        jobs=jobs,
        catalog=catalog,
        priors=priors,
        histories=recent,
        forecast_histories=window,
        outages=no_capacity(session, now=now),
        reservations=with_usage(session, now=now) if reservations is None else reservations,
        budgets=budgets,
        spot_available=spot_available,
        calibration=calibration,
        standby=standby,
    )


def calibration(settings: Settings) -> Calibration:
    """The settings decide() weighs, the same for the scheduler and the estimate."""
    return Calibration(
        restart_hours=settings.restart_hours,
        step_hours=settings.schedule_interval_s / 3600.0,
        gpu_speeds=normalized(settings.gpu_speeds),
        time_scale=settings.market_time_scale(),
    )


def _measured(
    session: Session,
    wanted: Mapping[str, tuple[str, str | None, str | None]],
) -> dict[str, Measured]:
    """Per name: what its team (id) measured under its checkpoint key and its throughput key;
    a key of None is not read."""
    costs = repository.learned_checkpoint_costs(
        session, keys=[(team, key) for team, key, _ in wanted.values() if key]
    )
    rates = repository.learned_gpu_rates(
        session, keys=[(team, key) for team, _, key in wanted.values() if key]
    )
    return {
        name: Measured(
            checkpoint_cost=costs.get((team, cost_key)) if cost_key else None,
            rates=rates.get((team, rate_key)) if rate_key else None,
        )
        for name, (team, cost_key, rate_key) in wanted.items()
    }


def _gpu_models(spec: Mapping[str, Any]) -> object:
    resources = spec.get("resources") if isinstance(spec, Mapping) else None
    return resources.get("gpu_models") if isinstance(resources, Mapping) else None


def measures(session: Session, jobs: Iterable[Job], *, speeds: Speeds) -> dict[str, Measured]:
    """Per job id: its team's measures of its trainer, for the jobs whose own checkpoint has not
    been measured yet (its cost), and that may run on more than one model under a speed table
    (its rates)."""
    wanted = {
        job.id: (
            job.team_id,
            job.checkpoint_key if job.checkpoint_stall_s is None else None,
            job.throughput_key if speeds and several_models(_gpu_models(job.spec)) else None,
        )
        for job in jobs
    }
    return _measured(session, wanted)


def _current(attempt: JobAttempt | None, *, stopping: bool = False) -> Current | None:
    if attempt is None:
        return None
    placement = attempt.placement
    return Current(
        offer_key=placement.offer_key,
        capacity_type=placement.capacity_type,
        started_at=attempt.started_at or attempt.created_at,
        reservation_id=placement.reservation_id,
        warm=attempt.ready_at is not None,  # only a standby's trainer says it is ready
        attempt_id=attempt.id,
        stopping=stopping or attempt.stop_reason is not None,
    )


def stored_problem(
    job: Job, spec: JobSpec, progress: stored_progress.Progress | None
) -> tuple[str, str] | None:
    """(field, why) for the first number the job's row (and its `progress`, as read) holds out
    of the bounds a progress report is held to (gpujobs.progress): one written before they
    held, or straight to the database. The scheduler weighs these; None: all are within them."""
    found: list[tuple[str, str]] = []
    if progress is not None:
        # A figure of the wrong type is judged as stored, so the event names why.
        as_stored = progress.unreadable
        found = [
            (f"progress.{name}", why)
            for name, why in progress_bounds.problems(
                spec,
                total_steps=as_stored.get("total_steps", progress.total_steps),
                samples_per_s=as_stored.get("samples_per_s", progress.samples_per_s),
            )
        ]
    found += progress_bounds.problems(
        spec,
        checkpoint_stall_s=job.checkpoint_stall_s,
        checkpoint_step=job.resume_from_step,
    )
    if not found:
        return None
    field, why = found[0]
    return ("resume_from_step" if field == "checkpoint_step" else field), why


def job_state(
    job: Job,
    attempt: JobAttempt | None = None,
    *,
    measured: Measured,
    speeds: Speeds,
    standby: JobAttempt | None = None,
) -> JobState:
    """decide()'s view of a job from its row (and its open attempt, when it runs); `speeds`:
    the snapshot's table, replaced for this job by what its team measured when that changes it."""
    spec = JobSpec.from_stored(job.spec)
    # None unless the measures change the table: a job with its own speeds is ranked anew.
    own = measured.speeds(speeds)
    table = own or speeds
    try:
        progress = stored_progress.read(job.progress)
        stored = stored_problem(job, spec, progress)
    except stored_progress.NotAReport:
        progress, stored = None, ("progress", "is not a progress report")
    if stored is not None:
        # Nothing is derived from the bad number: decide() sets the job aside as it is.
        return JobState(
            id=job.id,
            team=job.team_id,
            spec=spec,
            submitted_at=job.created_at,
            deadline_at=job.deadline_at,
            remaining_hours=0.0,
            state="running" if attempt is not None else "pending",
            current=_current(attempt),
            team_name=job.team.name if job.team is not None else None,
            cannot_weigh=stored,
        )
    return JobState(
        id=job.id,
        team=job.team_id,
        spec=spec,
        submitted_at=job.created_at,
        deadline_at=job.deadline_at,
        remaining_hours=remaining_hours(
            spec, progress=progress, resume_from_step=job.resume_from_step, speeds=table
        ),
        state="running" if attempt is not None else "pending",
        current=_current(attempt),
        # once the running attempt is released, the standby is the attempt that trains next
        standby=_current(standby, stopping=attempt is not None and attempt.stop_reason is not None),
        preemptions=job.preemptions,
        restarts=job.restarts,
        team_name=job.team.name if job.team is not None else None,
        checkpoint_cost_seconds=checkpoint_cost(job.checkpoint_stall_s, measured.checkpoint_cost),
        step_seconds=step_seconds(spec, progress, table),
        quote_usd=None if job.quote_hold_microusd is None else job.quote_hold_microusd / MICRO,
        budget_held=job.holds_budget,
        gpu_speeds=own,
    )


def job_states(
    session: Session,
    *,
    pending: Sequence[Job],
    running: Sequence[tuple[Job, JobAttempt]],
    speeds: Speeds,
    withdrawn_since: datetime | None = None,
) -> list[JobState]:
    """The scheduler's jobs as decide() sees them, pending first: a pending job's spot offers
    that preempted it before its first checkpoint are backed off. A job whose stored spec does
    not load is left out (logged): one unreadable job must not stop scheduling for everyone;
    one whose row holds a number out of bounds is marked (stored_problem), and decide() sets it
    aside with the field named. A running job's standby (among `running`) is seen as its
    `standby`, not as a second job; it holds no new one where one failed or never waited, nor,
    after `withdrawn_since`, where one was withdrawn."""
    standbys = {job.id: a for job, a in running if a.role is AttemptRole.STANDBY}
    running = [(job, a) for job, a in running if a.role is AttemptRole.PRIMARY]
    found = measures(session, [*pending, *(job for job, _ in running)], speeds=speeds)
    waiting = []
    for job in pending:
        try:
            waiting.append(job_state(job, measured=found[job.id], speeds=speeds))
        except Exception:
            log.exception("job %s cannot be scheduled: its stored spec does not load", job.id)
    strikes = repository.preempted_before_checkpoint(session, job_ids=[j.id for j in waiting])
    waiting = [
        replace(j, avoid=frozenset(strikes[j.id]), spot_strikes=len(strikes[j.id]))
        if j.id in strikes
        else j
        for j in waiting
    ]
    failed = repository.failed_standbys(
        session, job_ids=[job.id for job, _ in running], withdrawn_since=withdrawn_since
    )
    states = list(waiting)
    for job, attempt in running:
        try:
            state = job_state(
                job, attempt, measured=found[job.id], speeds=speeds, standby=standbys.get(job.id)
            )
        except Exception:
            log.exception("running job %s cannot be weighed: its stored spec does not load", job.id)
            continue
        states.append(replace(state, no_standby=frozenset(failed.get(job.id, ()))))
    return states


def prospective(
    session: Session,
    *,
    spec: JobSpec,
    team_id: str,
    team_name: str | None,
    now: datetime,
    speeds: Speeds,
) -> JobState:
    """A spec about to be submitted as decide() would see it the moment it is, with its team's
    measures of its trainer read as the scheduler will read them for the job."""
    keys = trainer_keys(spec)
    rate_key = keys.throughput_key if speeds and several_models(spec.resources.gpu_models) else None
    measured = _measured(session, {"": (team_id, keys.checkpoint_key, rate_key)})[""]
    return snapshots.prospective(
        spec,
        team=team_id,
        team_name=team_name,
        now=now,
        checkpoint_cost_seconds=checkpoint_cost(None, measured.checkpoint_cost),
        gpu_speeds=measured.speeds(speeds),
    )

"""One scheduling pass: claim pending jobs, build the snapshot, decide, apply, launch.

`decide` is pure (api.placement); this module is the IO around it. Each decision is applied in
its own transaction and only while this pass's claim on the job still holds, so a duplicate or
late pass (two beat ticks, a nudge racing a tick, a second scheduler) changes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from api import metrics
from api.catalog.repository import no_capacity
from api.database import transaction
from api.jobs import lifecycle
from api.models import Job, JobAttempt, new_id
from api.placement import decide
from api.placement.decisions import Decision, Defer, Migrate, Place, Reject
from gpujobs.resources import JobStatus
from gpujobs.spec import JobSpec
from worker import repository as repo
from worker import snapshot as snapshots
from worker.control import ControlPlane
from worker.launching import launch_attempt, stop_attempt

log = logging.getLogger(__name__)


@dataclass
class ScheduleResult:
    claimed: int = 0
    placed: list[str] = field(default_factory=list)  # attempt ids
    deferred: int = 0
    rejected: int = 0
    migrated: int = 0
    decide_seconds: float = 0.0


def schedule_once(cp: ControlPlane) -> ScheduleResult:
    token = new_id()
    now = cp.clock()
    result = ScheduleResult()
    with transaction(cp.factory) as session:
        ids = repo.claim_pending(
            session,
            token=token,
            now=now,
            ttl=timedelta(seconds=cp.settings.claim_ttl_s),
            limit=cp.settings.schedule_batch,
        )
    result.claimed = len(ids)
    try:
        _decide_and_apply(cp, ids=ids, token=token, now=now, result=result)
    finally:
        # Whatever this pass did not get to (an error, a job with no decision) is free again.
        if ids:
            with transaction(cp.factory) as session:
                repo.release_claims(session, token=token)
    for attempt_id in result.placed:
        launch_attempt(cp, attempt_id=attempt_id)
    return result


def _decide_and_apply(
    cp: ControlPlane, *, ids: list[str], token: str, now: datetime, result: ScheduleResult
) -> None:
    with cp.factory() as session:
        pending = []
        for job in repo.jobs_by_ids(session, ids=ids):
            try:
                pending.append(snapshots.job_state(job))
            except Exception:  # one unreadable job must not stop scheduling for everyone
                log.exception("job %s cannot be scheduled: its stored spec does not load", job.id)
        running = [snapshots.job_state(j, a) for j, a in repo.running_jobs_with_attempts(session)]
        if not pending and not running:
            return
        teams = sorted({job.team for job in [*pending, *running]})
        snapshot = snapshots.build(
            now=now,
            jobs=[*pending, *running],
            catalog=cp.catalog,
            priors=cp.priors,
            observations=repo.spot_observations(session),
            outages=no_capacity(session, now=now),
            reservations=cp.reservations(session, now),
            budgets=cp.budgets(session, teams, now),
            spot_available=_spot_available(cp),
            restart_hours=cp.settings.restart_hours,
            step_hours=cp.settings.schedule_interval_s / 3600.0,
        )
    started = time.perf_counter()
    decisions = decide(snapshot)
    result.decide_seconds = time.perf_counter() - started
    per_decision = result.decide_seconds / max(1, len(decisions))
    for decision in decisions:
        metrics.record_decision(type(decision).__name__.lower(), per_decision)
    for decision in decisions:
        _apply(cp, decision, token=token, result=result)


def _spot_available(cp: ControlPlane) -> bool | None:
    probe = getattr(cp.launcher, "spot_available", None)
    return probe() if probe is not None else None


def _apply(cp: ControlPlane, decision: Decision, *, token: str, result: ScheduleResult) -> None:
    if isinstance(decision, Migrate):
        if _apply_migrate(cp, decision):
            result.migrated += 1
        return
    with transaction(cp.factory) as session:
        job = repo.claimed_job(session, job_id=decision.job_id, token=token)
        if job is None:
            return  # our claim lapsed and another pass owns the job now
        job.lock_token = None
        job.lock_expires_at = None
        if isinstance(decision, Place):
            result.placed.append(_apply_place(session, job=job, place=decision))
        elif isinstance(decision, Reject):
            lifecycle.switch_status(session, job, JobStatus.FAILED, reason=decision.reason)
            result.rejected += 1
        elif isinstance(decision, Defer):
            job.status_reason = decision.reason  # no event: a deferral is not a status change
            result.deferred += 1


def _apply_place(session: Session, *, job: Job, place: Place) -> str:
    spec = JobSpec.from_stored(job.spec)
    offer = place.offer
    on_demand = (offer.on_demand_price or 0.0) * place.nodes
    attempt = JobAttempt(
        id=new_id(),
        job_id=job.id,
        team_id=job.team_id,
        number=job.attempts_count + 1,
        cloud=offer.cloud,
        region=offer.region,
        zone=offer.zone,
        instance_type=offer.instance_type,
        gpu_model=offer.gpu_model,
        gpu_count=offer.gpu_count,
        capacity_type=place.capacity_type.value,
        nodes=place.nodes,
        price_per_hour=place.price_per_hour,
        # What the same hours would have cost on-demand: the baseline for savings.
        on_demand_price_per_hour=on_demand if on_demand > 0 else place.price_per_hour,
        reservation_id=place.reservation_id,
        checkpoint_every_seconds=place.checkpoint_every_seconds
        if spec.trainer.checkpoint.auto
        else None,
        resume_from_step=job.resume_from_step,
    )
    session.add(attempt)
    job.attempts_count += 1
    lifecycle.switch_status(
        session,
        job,
        JobStatus.SCHEDULED,
        reason=place.reason,
        data={
            "attempt_id": attempt.id,
            "attempt": attempt.number,
            "offer": offer.key,
            "capacity_type": place.capacity_type.value,
            "price_per_hour": place.price_per_hour,
            "expected_cost": round(place.expected_cost, 4),
            "expected_finish": place.expected_finish.isoformat(),
            "p_meet_deadline": round(place.p_meet_deadline, 4),
        },
    )
    return attempt.id


def _apply_migrate(cp: ControlPlane, decision: Migrate) -> bool:
    """Checkpoint-then-stop the current attempt; the job then returns to PENDING and is placed
    again (the reconciler does both when the trainer has exited)."""
    with transaction(cp.factory) as session:
        attempt = repo.open_attempt_of(session, job_id=decision.job_id)
        if attempt is None or attempt.stop_reason is not None or attempt.launch_handle is None:
            return False
        attempt.stop_reason = "migrate"
        handle = attempt.launch_handle
        log.info("migrating job %s: %s", decision.job_id, decision.reason)
    stop_attempt(cp, handle=handle)
    return True

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
from api.database import read_session, transaction
from api.jobs import lifecycle
from api.jobs import standby as standbys
from api.jobs.lifecycle import capped_reason
from api.jobs.standby import Transition
from api.models import AttemptRole, Job, JobAttempt, new_id
from api.placement import decide, world
from api.placement.decisions import (
    Decision,
    Defer,
    Migrate,
    Place,
    Reject,
    Standby,
    Unweighable,
    Withdraw,
)
from api.placement.plan import Plan
from gpujobs.reasons import StopReason
from gpujobs.resources import JobStatus
from worker import repository as repo
from worker.control import ControlPlane
from worker.launchers.base import holds_standby, spot_probe
from worker.launching import launch_attempt, stop_attempt

log = logging.getLogger(__name__)


@dataclass
class ScheduleResult:
    claimed: int = 0
    placed: list[str] = field(default_factory=list)  # attempt ids
    deferred: int = 0
    rejected: int = 0
    migrated: int = 0
    standbys: int = 0
    withdrawn: int = 0  # standbys stopped before their handover
    set_aside: int = 0  # jobs decide() could not weigh, left as they were
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
    with read_session(cp.factory) as session:
        calibration = world.calibration(cp.settings)
        jobs = world.job_states(
            session,
            pending=repo.jobs_by_ids(session, ids=ids),
            running=repo.open_attempts(session, job_status=JobStatus.RUNNING),
            speeds=calibration.gpu_speeds,
            # a standby withdrawn is not held again there at once: a rate estimate hovering
            # at the rule's edge would otherwise start one and withdraw it pass after pass
            withdrawn_since=now - timedelta(seconds=cp.settings.no_capacity_backoff_s),
        )
        if not jobs:
            return
        teams = sorted({job.team for job in jobs})
        snapshot = world.snapshot(
            session,
            now=now,
            jobs=jobs,
            catalog=cp.catalog,
            priors=cp.priors,
            reservations=cp.reservations(session, now),
            budgets=cp.budgets(session, teams, now),
            spot_available=_spot_available(cp),
            calibration=calibration,
            standby=cp.settings.standby and holds_standby(cp.launcher),
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
    probe = spot_probe(cp.launcher)
    return probe.spot_available() if probe is not None else None


def _apply(cp: ControlPlane, decision: Decision, *, token: str, result: ScheduleResult) -> None:
    if isinstance(decision, Migrate):
        if _apply_migrate(cp, decision):
            result.migrated += 1
        return
    if isinstance(decision, Withdraw):
        with transaction(cp.factory) as session:
            result.withdrawn += _apply_withdraw(session, decision=decision)
        return
    if isinstance(decision, Unweighable):
        with transaction(cp.factory) as session:
            result.set_aside += _apply_unweighable(session, decision=decision)
        return
    if isinstance(decision, Standby):
        with transaction(cp.factory) as session:
            attempt_id = _apply_standby(session, decision=decision)
        if attempt_id is not None:
            result.placed.append(attempt_id)
            result.standbys += 1
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


def _new_attempt(
    session: Session, *, job: Job, plan: Plan, role: AttemptRole = AttemptRole.PRIMARY
) -> JobAttempt:
    attempt = JobAttempt.placed(
        plan.placement,
        id=new_id(),
        job_id=job.id,
        team_id=job.team_id,
        number=job.attempts_count + 1,
        # The interval the cost model priced; the trainer is always told it.
        checkpoint_every_seconds=plan.checkpoint_every_seconds,
        resume_from_step=job.resume_from_step,
        role=role,
    )
    session.add(attempt)
    job.attempts_count += 1
    return attempt


def _apply_place(session: Session, *, job: Job, place: Place) -> str:
    plan = place.plan
    placement = plan.placement
    attempt = _new_attempt(session, job=job, plan=plan)
    if job.quote_hold_microusd is not None:
        job.holds_budget = True  # a job deferred for budget holds its quote from now on
    data: dict[str, object] = {
        "attempt_id": attempt.id,
        "attempt": attempt.number,
        "offer": placement.offer_key,
        "capacity_type": placement.capacity_type.value,
        "price_per_hour": placement.price_per_hour,
        "expected_cost": round(plan.expected_cost, 4),
        "expected_finish": plan.expected_finish.isoformat(),
    }
    if not plan.work_assumed:
        data["p_meet_deadline"] = round(plan.p_meet_deadline, 4)
    lifecycle.switch_status(session, job, JobStatus.SCHEDULED, reason=place.reason, data=data)
    return attempt.id


def _apply_standby(session: Session, *, decision: Standby) -> str | None:
    """A standby attempt beside the job's running one, if the job still runs there and holds
    none (the decision was taken on a snapshot; the job row's lock makes this the only one)."""
    job = repo.job_for_update(session, job_id=decision.job_id)
    if job is None or job.status != JobStatus.RUNNING.value:
        return None
    running = repo.open_attempt(session, job_id=job.id)
    if running is None or running.stop_reason is not None:
        return None
    if repo.open_standby(session, job_id=job.id) is not None:
        return None
    placement = decision.to.plan.placement
    attempt = _new_attempt(session, job=job, plan=decision.to.plan, role=AttemptRole.STANDBY)
    capacity = placement.capacity_type.value.replace("_", "-")
    lifecycle.note(
        session,
        job,
        reason=f"standby on {capacity} {placement.offer_key} at ${placement.price_per_hour:.2f}/h "
        f"beside attempt {running.number}: {decision.reason}",
        data={
            "standby_attempt_id": attempt.id,
            "standby_attempt": attempt.number,
            "attempt": running.number,
            "offer": placement.offer_key,
            "capacity_type": placement.capacity_type.value,
            "price_per_hour": placement.price_per_hour,
        },
    )
    return attempt.id


def _apply_withdraw(session: Session, *, decision: Withdraw) -> int:
    """Mark the standby judged to be stopped, unless the handover has begun: once the running
    attempt is released, the standby is the attempt that trains next. The reconciler stops it
    (handover.observe_standby). Only the standby's row is locked, so this cannot join a lock
    cycle with a reconciling pass; the release is written under that same lock, so it is either
    seen here or comes after the mark and is refused by it."""
    standby = repo.attempt_for_update(session, attempt_id=decision.attempt_id)
    running = repo.open_attempt(session, job_id=decision.job_id)
    if standby is None or not standbys.may(Transition.WITHDRAW, standby, running=running):
        return 0
    job = session.get(Job, decision.job_id)
    if job is None or running is None or running.stop_reason is not None:
        return 0
    standbys.withdraw(standby, running=running)
    lifecycle.note(
        session,
        job,
        reason=f"standby attempt {standby.number} withdrawn: {decision.reason}",
        data={"standby_attempt": standby.number, "attempt": running.number},
    )
    return 1


def _apply_unweighable(session: Session, *, decision: Unweighable) -> int:
    """Leave the job as it is (a pending one waits, its claim released with the pass's; a
    running one runs on) and say why: a pending job's status reason, and an event the first
    time, not one each pass."""
    job = repo.job_for_update(session, job_id=decision.job_id)
    if job is None or JobStatus(job.status).terminal:
        return 0
    log.warning("job %s set aside: %s", job.id, decision.reason)
    if job.status == JobStatus.PENDING.value:
        job.status_reason = decision.reason
    if repo.last_event_reason(session, job_id=job.id) != capped_reason(decision.reason):
        lifecycle.note(session, job, reason=decision.reason, data={"field": decision.field})
    return 1


def _apply_migrate(cp: ControlPlane, decision: Migrate) -> bool:
    """Checkpoint-then-stop the current attempt; the job then returns to PENDING and is placed
    again (the reconciler does both when the trainer has exited)."""
    with transaction(cp.factory) as session:
        attempt = repo.open_attempt(session, job_id=decision.job_id, for_update=True)
        if attempt is None or attempt.stop_reason is not None or attempt.launch_handle is None:
            return False
        attempt.stop_reason = StopReason.MIGRATE
        handle = attempt.launch_handle
        log.info("migrating job %s: %s", decision.job_id, decision.reason)
    stop_attempt(cp, handle=handle)
    return True

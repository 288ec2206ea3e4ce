"""One reconciling pass: observe every open attempt and move its job accordingly, then hold
teams to their budgets while their jobs run.

Observations (launcher IO) happen outside transactions; applying one locks the attempt and the
job and re-checks that the attempt is still open, so two passes never close it twice.

Budgets: `api.budgets.enforcement.decide` names the running jobs whose team's spend plus holds
would pass its budget before the next check; each is asked to stop (SIGTERM: the trainer
checkpoints) with its attempt marked, and when the launcher reports it gone the job fails
(on_budget_exceeded: reject) or goes back to PENDING without its hold (defer), resumed from its
checkpoint once the scheduler finds budget for it. Neither spends a restart or counts as a
preemption.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from api import metrics
from api.budgets import enforcement
from api.budgets.service import commitment_us, running_ledgers
from api.catalog.repository import mark_outage
from api.database import read_session, transaction
from api.jobs import lifecycle
from api.models import Job, JobAttempt
from gpujobs.reasons import EndReason, StopReason
from gpujobs.resources import JobStatus
from gpujobs.spec import JobSpec
from worker import first_report, handover
from worker import repository as repo
from worker.billing import close, ending
from worker.control import ControlPlane
from worker.handover import STILL_THERE
from worker.launchers.base import Observation, ObservedState
from worker.launching import launch_attempt, stop_attempt
from worker.outcomes import Outcome, outcome
from worker.storage_credentials.revocation import revoke_ended

log = logging.getLogger(__name__)


def reconcile_once(cp: ControlPlane) -> int:
    """Returns how many attempts changed (closed, moved, or asked to stop for a budget)."""
    with read_session(cp.factory) as session:
        rows = [(attempt.id, job.status) for job, attempt in repo.open_attempts(session)]
    changed = 0
    for attempt_id, job_status in rows:
        try:
            changed += reconcile_attempt(cp, attempt_id=attempt_id, job_status=job_status)
        except Exception:
            log.exception("reconciling attempt %s failed; next pass retries", attempt_id)
    try:
        changed += enforce_budgets(cp)
    except Exception:
        log.exception("enforcing budgets failed; next pass retries")
    if cp.storage is not None:
        try:
            revoke_ended(
                storage=cp.storage,
                factory=cp.factory,
                pace=cp.revocations,
                now=cp.clock(),
                interval_s=cp.settings.storage_revoke_interval_s,
            )
        except Exception:
            log.exception("revoking ended attempts' S3 keys failed; next pass retries")
    return changed


# attempt.stop_reason of an attempt stopped for its team's budget, by on_budget_exceeded.
BUDGET_STOPS: dict[enforcement.OnBudgetExceeded, StopReason] = {
    "reject": StopReason.BUDGET_REJECT,
    "defer": StopReason.BUDGET_DEFER,
}


def enforce_budgets(cp: ControlPlane) -> int:
    """Ask the running jobs that would take their team past its budget to stop; returns how
    many were asked. After the pass's observations, so that spend counts what just ended."""
    now = cp.clock()
    interval = cp.settings.reconcile_interval_s
    with read_session(cp.factory) as session:
        ledgers = running_ledgers(session, now=now, horizon_us=commitment_us(interval))
    stops = enforcement.decide(ledgers, tick_us=enforcement.tick_us(interval))
    return sum(_stop_for_budget(cp, stop=stop) for stop in stops)


def _stop_for_budget(cp: ControlPlane, *, stop: enforcement.Stop) -> int:
    with transaction(cp.factory) as session:
        attempt = repo.open_attempt(session, job_id=stop.job_id, for_update=True)
        if attempt is None or attempt.stop_reason is not None or attempt.launch_handle is None:
            return 0  # ended, or already being stopped (a cancel, a migration, a budget)
        job = repo.job_for_update(session, job_id=stop.job_id)
        if job is None or job.status != JobStatus.RUNNING.value:
            return 0
        attempt.stop_reason = BUDGET_STOPS[stop.action]
        # Shown at once; the job stays RUNNING while its trainer checkpoints, and the status
        # switch when it has exited records this reason in the job's events.
        job.status_reason = stop.reason
        handle = attempt.launch_handle
    log.warning("job %s: %s", stop.job_id, stop.reason)
    stop_attempt(cp, handle=handle)
    return 1


def reconcile_attempt(cp: ControlPlane, *, attempt_id: str, job_status: str) -> int:
    with read_session(cp.factory) as session:
        attempt = session.get(JobAttempt, attempt_id)
        if attempt is None or attempt.ended_at is not None:
            return 0
        handle = attempt.launch_handle
        created_at = attempt.created_at
        # Stops asked again on every pass until the attempt has gone: a worker killed between
        # the mark and the stop, or a stop that did not take, costs one pass (the launcher
        # keeps the stop's escalation).
        stopped_by_us = attempt.stop_reason in RESENT_STOPS
    if job_status == JobStatus.CANCELLED.value:
        return _cancel(cp, attempt_id=attempt_id, handle=handle)
    if handle is None:
        if cp.clock() - created_at > timedelta(seconds=cp.settings.launch_timeout_s):
            observation = Observation(ObservedState.LOST, message="the launch never completed")
            return _apply(cp, attempt_id=attempt_id, observation=observation)
        launch_attempt(cp, attempt_id=attempt_id)
        return 0
    observation = cp.launcher.status(handle)
    if stopped_by_us and observation.state in STILL_THERE:
        stop_attempt(cp, handle=handle)
    changed = _apply(cp, attempt_id=attempt_id, observation=observation)
    if observation.state == ObservedState.RUNNING:
        changed += first_report.check(cp, attempt_id=attempt_id)
    return changed


RESENT_STOPS = frozenset({StopReason.HANDOVER, StopReason.NO_FIRST_REPORT})


def _cancel(cp: ControlPlane, *, attempt_id: str, handle: str | None) -> int:
    """Stop the attempt, and close it only once the launcher reports it gone: until then it
    holds capacity and stays on the ledger. The stop (and its escalation) is the launcher's to
    persist, so a pass after a crash picks it up where it was; asking again is harmless."""
    if handle is not None:
        stop_attempt(cp, handle=handle)
        if cp.launcher.status(handle).state in STILL_THERE:
            _mark_stopping(cp, attempt_id=attempt_id)
            return 0
    with transaction(cp.factory) as session:
        attempt = repo.attempt_for_update(session, attempt_id=attempt_id)
        if attempt is None or attempt.ended_at is not None:
            return 0
        attempt.stop_reason = StopReason.CANCEL
        if attempt.started_at is None:
            # Stopped before any pass saw it running: what was launched held capacity from its
            # launch all the same (None: never launched, nothing to bill).
            attempt.started_at = attempt.launched_at
        job = repo.job_for_update(session, job_id=attempt.job_id)
        now = cp.clock()
        # Spot hours run until the cancel still count for the pool's preemption rate: they are
        # read from the closed attempt (api.placement.learning).
        close(session, attempt=attempt, job=job, now=now, end_reason=EndReason.CANCELLED)
    return 1


def _mark_stopping(cp: ControlPlane, *, attempt_id: str) -> None:
    with transaction(cp.factory) as session:
        attempt = repo.attempt_for_update(session, attempt_id=attempt_id)
        if attempt is not None and attempt.ended_at is None and attempt.stop_reason is None:
            attempt.stop_reason = StopReason.CANCEL


def _apply(cp: ControlPlane, *, attempt_id: str, observation: Observation) -> int:
    now = cp.clock()
    with transaction(cp.factory) as session:
        attempt = repo.attempt_for_update(session, attempt_id=attempt_id)
        if attempt is None or attempt.ended_at is not None:
            return 0
        job = repo.job_for_update(session, job_id=attempt.job_id)
        assert job is not None
        step = handover.observe(
            session, cp=cp, attempt=attempt, job=job, observation=observation, now=now
        )
        if step is None:
            step = handover.Step(
                changed=_apply_observation(
                    session, cp=cp, attempt=attempt, job=job, observation=observation, now=now
                )
            )
    # Only once the transaction has committed: launcher IO never happens inside one, and a stop
    # whose reason was not saved would be read as a failure.
    for handle in step.stop:
        stop_attempt(cp, handle=handle)
    return step.changed


def _apply_observation(
    session: Session,
    *,
    cp: ControlPlane,
    attempt: JobAttempt,
    job: Job,
    observation: Observation,
    now: datetime,
) -> int:
    spec = JobSpec.from_stored(job.spec)
    result = (
        _budget_outcome(
            observation=observation,
            job_status=JobStatus(job.status),
            stop_reason=attempt.stop_reason,
            reason=job.status_reason,
        )
        or first_report.outcome(
            observation=observation,
            job_status=JobStatus(job.status),
            stop_reason=attempt.stop_reason,
            reason=job.status_reason,
        )
        or outcome(
            observation=observation,
            job_status=JobStatus(job.status),
            stop_reason=attempt.stop_reason,
            restarts=job.restarts,
            max_restarts=spec.max_restarts,
        )
    )
    if result.started and attempt.started_at is None:
        attempt.started_at = attempt.launched_at or now
    if observation.state == ObservedState.RUNNING and attempt.running_at is None:
        attempt.running_at = now  # its trainer's wait for a first report counts from here
    if result.end_reason is None and not result.path:
        return _say_held(session, attempt=attempt, job=job, observation=observation)
    if result.end_reason is not None:
        attempt.exit_code = observation.exit_code
        close(session, attempt=attempt, job=job, now=now, end_reason=result.end_reason)
        _observe_capacity(session, cp=cp, attempt=attempt, result=result, now=now)
    _move_job(session, job=job, attempt=attempt, result=result)
    if result.end_reason == EndReason.BUDGET_PAUSED:
        # It waits like a job deferred at submit: the scheduler places it again only when
        # the budget can hold its quote, and it holds it from then on.
        job.holds_budget = False
    return 1


# In the data of the event that says an attempt is held, beside the attempt's number.
HELD = "held"


def _say_held(session: Session, *, attempt: JobAttempt, job: Job, observation: Observation) -> int:
    """An attempt held by something outside it (a queue's quota) may wait long: its job's status
    line says why while it waits, and its events once when the wait starts and once for each new
    reason, not on every pass. Not one being stopped: its status says why it stops."""
    message = lifecycle.capped_reason(observation.message)
    if not observation.held or not message or attempt.stop_reason is not None:
        return 0
    if job.status_reason == message:
        return 0
    job.status_reason = message
    # Read only when the reason changed: Kueue's word may go back to one said before.
    said = any(
        reason == message and data.get(HELD) is True and data.get("attempt") == attempt.number
        for reason, data in repo.note_reasons(session, job_id=job.id)
    )
    if not said:
        lifecycle.note(session, job, reason=message, data={"attempt": attempt.number, HELD: True})
    return 1


def _budget_outcome(
    *, observation: Observation, job_status: JobStatus, stop_reason: str | None, reason: str | None
) -> Outcome | None:
    """An attempt stopped for its team's budget has exited: the job fails (reject) or waits for
    budget (defer, through PREEMPTED like a preemption), resuming from its checkpoint. Not a
    failure (no restart spent) nor a preemption. None: not such an attempt, or not over (one
    that finished before the stop took effect succeeded)."""
    state = observation.state
    if stop_reason not in BUDGET_STOPS.values() or state in {*STILL_THERE, ObservedState.SUCCEEDED}:
        return None
    via_running = (JobStatus.RUNNING,) if job_status == JobStatus.SCHEDULED else ()
    if not (reason and reason.startswith(enforcement.BUDGET_EXCEEDED)):
        reason = enforcement.BUDGET_EXCEEDED  # the decision's own words were overwritten
    if stop_reason == StopReason.BUDGET_DEFER:
        path = (*via_running, JobStatus.PREEMPTED, JobStatus.PENDING)
        return Outcome(EndReason.BUDGET_PAUSED, path, reason, started=True)
    return Outcome(EndReason.BUDGET_STOPPED, (*via_running, JobStatus.FAILED), reason, started=True)


def _observe_capacity(
    session: Session, *, cp: ControlPlane, attempt: JobAttempt, result: Outcome, now: datetime
) -> None:
    """Offers that had no capacity are avoided for a while, whatever the capacity type. (Spot
    hours and preemptions, the preemption rate, are read from the attempts themselves.)"""
    placement = attempt.placement
    if result.no_capacity:
        mark_outage(
            session,
            zone=placement.zone,
            instance_type=placement.instance_type,
            capacity_type=placement.capacity_type,
            until=now + timedelta(seconds=cp.settings.no_capacity_backoff_s),
            reason=result.reason,
        )


def _move_job(session: Session, *, job: Job, attempt: JobAttempt, result: Outcome) -> None:
    if JobStatus(job.status) == JobStatus.CANCELLED:
        return  # a cancel won the race: the attempt is closed, the job stays cancelled
    if result.preempted:
        job.preemptions += 1
        metrics.record_preemption()
    if result.failure and JobStatus.PENDING in result.path:
        job.restarts += 1
    data = ending(attempt, job)
    for status in result.path:
        lifecycle.switch_status(session, job, status, reason=result.reason, data=data)

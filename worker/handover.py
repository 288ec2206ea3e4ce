"""Make-before-break: a standby attempt beside the running one, and the handover between them.

The steps, each taken by a reconciling pass in its own transaction from what the database and
the launcher say now, so a worker killed between any two of them loses nothing (the states and
their transitions are api.jobs.standby's; this module walks them):

1. **Held.** The scheduler adds the standby (`AttemptRole.STANDBY`, worker.scheduler) and
   launches it with `RunConfig.standby`: its trainer builds, then asks the API whether to go.
2. **Ready.** Its first call records `ready_at` (api.jobs.service.standby_answer).
3. **Released.** Once the standby is ready and the running attempt has started, the running
   attempt is marked `stop_reason = "handover"` and stopped: its trainer checkpoints on the
   notice and exits. The stop is sent again on every pass while it runs (a crash between the
   mark and the stop, or a lost signal, costs one pass).
4. **Handed over.** When the launcher reports the running attempt gone, one transaction closes
   it (`handed_over`) and promotes the standby (its role becomes primary): from then on the API
   answers the standby `go`, and it restores the newest checkpoint and trains. Gone means every
   process of it, not only its trainer: a helper it left behind (in a session of its own,
   ignoring SIGTERM) is killed by the launcher before it reports the attempt over, and the job's
   events say so; left running, it wrote into the checkpoints the standby restores from.

Exactly one attempt trains at any moment: the standby may train only once it is promoted, and it
is promoted only after the launcher has seen the old attempt's trainer gone. A standby that gets
no capacity, is preempted or dies before the handover costs its own minutes and leaves the job
running; one lost after the release leaves the job to be placed again from its checkpoint, as a
migration does. A standby whose job no longer runs where it stood (ended, moved, stopping) is
stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from api.catalog.repository import mark_outage
from api.jobs import lifecycle
from api.jobs import standby as standbys
from api.jobs.standby import StandbyState
from api.models import AttemptRole, Job, JobAttempt
from api.money import MICRO, cost_microusd
from gpujobs.reasons import EndReason, StopReason
from gpujobs.resources import JobStatus
from worker import repository as repo
from worker.billing import close, ending
from worker.control import ControlPlane
from worker.launchers.base import Observation, ObservedState

# What the launcher may still report while an attempt's processes or pods live on.
STILL_THERE = frozenset({ObservedState.RUNNING, ObservedState.PENDING})


@dataclass
class Step:
    """What a pass did to a job's standby: how many changes, and which handles to stop once the
    transaction has committed (launcher IO never happens inside one)."""

    changed: int = 0
    stop: list[str] = field(default_factory=list)


def observe(
    session: Session,
    *,
    cp: ControlPlane,
    attempt: JobAttempt,
    job: Job,
    observation: Observation,
    now: datetime,
) -> Step | None:
    """One observation of an attempt (its row and its job's locked by the caller), where it
    takes part in a handover: a standby's, or the released attempt's once it has gone. None: the
    job's attempt and nothing more, for the reconciler's own rules."""
    if attempt.role is AttemptRole.STANDBY:
        return observe_standby(
            session, cp=cp, standby=attempt, job=job, observation=observation, now=now
        )
    if attempt.stop_reason == StopReason.HANDOVER and observation.state not in {
        *STILL_THERE,
        ObservedState.SUCCEEDED,
    }:
        complete(session, old=attempt, job=job, observation=observation, now=now)
        return Step(changed=1)
    return None


def observe_standby(
    session: Session,
    *,
    cp: ControlPlane,
    standby: JobAttempt,
    job: Job,
    observation: Observation,
    now: datetime,
) -> Step:
    """Apply one observation of a standby (both rows locked by the caller): bill it once it
    runs, close it when it has gone, stop it when it is no longer wanted, and release the running
    attempt once it is ready."""
    state = observation.state
    if state == ObservedState.RUNNING and standby.started_at is None:
        standby.started_at = standby.launched_at or now  # it holds capacity: billing starts
    if state == ObservedState.RUNNING and standby.running_at is None:
        standby.running_at = now  # its trainer is starting: the wait for it counts from here
    if state not in STILL_THERE:
        _close_lost(session, cp=cp, standby=standby, job=job, observation=observation, now=now)
        return Step(changed=1)
    handle = [standby.launch_handle] if standby.launch_handle else []
    if standby.stop_reason is not None:
        return Step(stop=handle)  # being stopped: asked again until it has gone, never released
    running = repo.open_attempt(session, job_id=job.id, for_update=True)
    wanted = (
        job.status == JobStatus.RUNNING.value
        and running is not None
        and running.number < standby.number  # the attempt it was held beside, not a later one
        and running.stop_reason in (None, StopReason.HANDOVER)
    )
    stuck = (
        standby.ready_at is None
        and standby.running_at is not None
        and now - standby.running_at > timedelta(seconds=cp.settings.launch_timeout_s)
    )
    if not wanted or stuck:
        reason = StopReason.STANDBY_STUCK if wanted else StopReason.STANDBY_STOP
        standbys.stop(standby, reason=reason, running=running)
        if not JobStatus(job.status).terminal:
            why = (
                f"its trainer did not wait within {cp.settings.launch_timeout_s:.0f} s of "
                "getting capacity"
                if wanted
                else f"attempt {running.number if running else '-'} it stood beside no longer runs"
            )
            lifecycle.note(
                session,
                job,
                reason=f"standby attempt {standby.number} stopped: {why}",
                data={"standby_attempt": standby.number},
            )
        return Step(changed=1, stop=handle)
    assert running is not None
    if (
        standbys.may(standbys.Transition.RELEASE, standby, running=running)
        and running.stop_reason is None
        and running.started_at is not None
        and running.launch_handle is not None
    ):
        standbys.release(standby, running=running)
        lifecycle.note(
            session,
            job,
            reason=f"handover: attempt {running.number} checkpoints and stops; standby attempt "
            f"{standby.number} on {_capacity(standby)} takes over from that step",
            data={"attempt": running.number, "standby_attempt": standby.number},
        )
        return Step(changed=1, stop=[running.launch_handle])
    return Step()


def complete(
    session: Session, *, old: JobAttempt, job: Job, observation: Observation, now: datetime
) -> None:
    """The released attempt has gone (checkpointed on the notice, or killed): close it and
    promote the standby in one transaction, or, with no standby left to take over, place the
    job again from its checkpoint."""
    old.exit_code = observation.exit_code
    close(session, attempt=old, job=job, now=now, end_reason=EndReason.HANDED_OVER)
    if observation.killed:
        lifecycle.note(
            session,
            job,
            reason=f"handover: {observation.killed} process(es) of attempt {old.number} did not "
            "exit on the notice or outlived its trainer, and were killed before the handover",
            data={"attempt": old.number, "killed": observation.killed},
        )
    if JobStatus(job.status) != JobStatus.RUNNING:
        return  # a cancel won the race: the job stays where it is
    standby = repo.open_standby(session, job_id=job.id, for_update=True)
    data = ending(old, job)
    if standby is None or standbys.state(standby, running=old) is not StandbyState.RELEASED:
        reason = "the standby was lost during the handover: placing again from the checkpoint"
        for status in (JobStatus.PREEMPTED, JobStatus.PENDING):
            lifecycle.switch_status(session, job, status, reason=reason, data=data)
        return
    standbys.hand_over(standby, old=old, resume_from_step=job.resume_from_step, now=now)
    assert standby.started_at is not None  # the handover bills it from its launch at the latest
    overlap = cost_microusd(
        price_per_hour=standby.price_per_hour,
        started_at=standby.started_at,
        ended_at=max(now, standby.started_at),
    )
    step = job.resume_from_step or 0
    lost = old.steps_lost or 0
    reason = (
        f"handed over at step {step} from attempt {old.number} ({_capacity(old)}) to attempt "
        f"{standby.number} ({_capacity(standby)}), {lost} steps lost; the overlap cost "
        f"${overlap / MICRO:.4f}"
    )
    job.status_reason = reason
    lifecycle.note(
        session,
        job,
        reason=reason,
        data={
            **data,
            "to_attempt": standby.number,
            "to_attempt_id": standby.id,
            "capacity_type": standby.capacity_type,
            "overlap_cost": round(overlap / MICRO, 6),
        },
    )


def _close_lost(
    session: Session,
    *,
    cp: ControlPlane,
    standby: JobAttempt,
    job: Job,
    observation: Observation,
    now: datetime,
) -> None:
    """A standby that went before any handover: on the ledger, with what it taught of its pool
    (a preemption, no capacity), and a line on the job; the job runs on as it was."""
    state, code = observation.state, observation.exit_code
    # What the launcher saw of the pool is the pool's own news, even for a standby being
    # stopped: it is learned from (an outage, a preemption). An exit code is the trainer's
    # word, never a preemption (worker.outcomes).
    if state == ObservedState.NO_CAPACITY:
        end_reason = EndReason.NO_CAPACITY
    elif state == ObservedState.PREEMPTED:
        end_reason = EndReason.PREEMPTED
    elif standby.stop_reason == StopReason.STANDBY_STOP:
        end_reason = EndReason.STANDBY_STOPPED
    elif standby.stop_reason in (StopReason.STANDBY_STUCK, StopReason.WITHDRAWN):
        end_reason = EndReason(standby.stop_reason)  # stopped and ended for the same reason
    elif state == ObservedState.LOST:
        end_reason = EndReason.LOST
    else:
        end_reason = EndReason.FAILED
    standby.exit_code = code
    if standby.started_at is None and state != ObservedState.NO_CAPACITY:
        standby.started_at = standby.launched_at  # it held capacity from its launch all the same
    close(session, attempt=standby, job=job, now=now, end_reason=end_reason)
    if end_reason == EndReason.NO_CAPACITY:
        placement = standby.placement
        mark_outage(
            session,
            zone=placement.zone,
            instance_type=placement.instance_type,
            capacity_type=placement.capacity_type,
            until=now + timedelta(seconds=cp.settings.no_capacity_backoff_s),
            reason=observation.message or "no capacity",
        )
    if (
        end_reason in (EndReason.STANDBY_STOPPED, EndReason.STANDBY_STUCK, EndReason.WITHDRAWN)
        or JobStatus(job.status).terminal
    ):
        return
    detail = f": {observation.message}" if observation.message else ""
    lifecycle.note(
        session,
        job,
        reason=f"standby attempt {standby.number} on {_capacity(standby)} ended before the "
        f"handover ({end_reason.replace('_', ' ')}{detail}); it cost "
        f"${(standby.cost_microusd or 0) / MICRO:.4f} and the job runs on",
        data={
            "standby_attempt": standby.number,
            "end_reason": end_reason,
            "cost": (standby.cost_microusd or 0) / MICRO,
        },
    )


def _capacity(attempt: JobAttempt) -> str:
    return f"{attempt.capacity_type.replace('_', '-')} {attempt.zone}"

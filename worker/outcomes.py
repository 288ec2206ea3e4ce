"""What an observation of a launched attempt means for the attempt and its job: a pure mapping.

The reconciler applies the result in one transaction (attempt closed with its cost, job moved
through lifecycle.switch_status); keeping the rules here makes them testable without IO.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpujobs.resources import JobStatus
from worker.launchers.base import Observation, ObservedState

S = JobStatus


@dataclass(frozen=True)
class Outcome:
    end_reason: str | None  # None: the attempt stays open
    path: tuple[JobStatus, ...]  # statuses the job passes through, in order
    reason: str
    preempted: bool = False  # counts as a preemption (and for the spot preemption rate)
    failure: bool = False  # spends one of max_restarts
    no_capacity: bool = False
    started: bool = False  # the attempt is (or was) running: billing starts


def outcome(
    *,
    observation: Observation,
    job_status: JobStatus,
    stop_reason: str | None,
    restarts: int,
    max_restarts: int,
) -> Outcome:
    state = observation.state
    code = observation.exit_code
    via_running = (S.RUNNING,) if job_status == S.SCHEDULED else ()

    if state == ObservedState.PENDING:
        return Outcome(None, (), "waiting to start")
    if state == ObservedState.RUNNING:
        return Outcome(None, via_running, "running", started=True)
    if state == ObservedState.NO_CAPACITY:
        return Outcome(
            "no_capacity", (S.PENDING,), observation.message or "no capacity", no_capacity=True
        )
    if stop_reason == "migrate" and state != ObservedState.SUCCEEDED:
        return Outcome(
            "migrated",
            (*via_running, S.PREEMPTED, S.PENDING),
            "moved to cheaper or safer capacity",
            started=True,
        )
    if state == ObservedState.SUCCEEDED:
        return Outcome("succeeded", (*via_running, S.SUCCEEDED), "trainer finished", started=True)
    if state == ObservedState.PREEMPTED:
        return Outcome(
            "preempted",
            (*via_running, S.PREEMPTED, S.PENDING),
            observation.message or "capacity was reclaimed; resuming from the last checkpoint",
            preempted=True,
            started=True,
        )
    if state == ObservedState.CANCELLED and stop_reason == "cancel":
        return Outcome("cancelled", (S.CANCELLED,), "cancelled", started=True)
    # FAILED, LOST, or stopped by someone else: a failure, retried while restarts remain.
    what = f"exit code {code}" if code is not None else (observation.message or state.value)
    if restarts < max_restarts:
        return Outcome(
            "failed" if state == ObservedState.FAILED else "lost",
            (*via_running, S.PENDING),
            f"attempt failed ({what}); restart {restarts + 1} of {max_restarts}",
            failure=True,
            started=True,
        )
    return Outcome(
        "failed" if state == ObservedState.FAILED else "lost",
        (*via_running, S.FAILED),
        f"attempt failed ({what}); no restarts left",
        failure=True,
        started=True,
    )

"""What an observation of a launched attempt means for the attempt and its job: a pure mapping.

The reconciler applies the result in one transaction (attempt closed with its cost, job moved
through lifecycle.switch_status); keeping the rules here makes them testable without IO.

A preemption is what the launcher saw (PREEMPTED: the notice it delivered, the platform's
signal), never an exit code: 75 is what a trainer exits with after a notice, and a trainer is a
team's code, which can exit 75 whenever it likes. Read as a preemption, such an exit spent no
restart (the job relaunched forever) and taught every team's quotes that its pool was
unreliable. Without a notice it is a failure like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpujobs.reasons import EndReason, StopReason
from gpujobs.resources import JobStatus
from gpujobs.runtime import EXIT_CONFIG_ERROR, EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT
from worker.launchers.base import Observation, ObservedState

S = JobStatus
# The job cannot run as specified: a retry would fail the same way and be billed again. 2 is
# what Python and argparse exit with on a bad command line; 78 is the trainer's EX_CONFIG.
CONFIG_ERROR_EXIT_CODES = frozenset({2, EXIT_CONFIG_ERROR})
# What a trainer exits with after a preemption notice: named in a failure's reason when no
# notice was given, since a user reading "exit code 75" would take it for one.
PREEMPTED_EXIT_CODES = frozenset({EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT})


@dataclass(frozen=True)
class Outcome:
    end_reason: EndReason | None  # None: the attempt stays open
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
            EndReason.NO_CAPACITY,
            (S.PENDING,),
            observation.message or "no capacity",
            no_capacity=True,
        )
    if stop_reason == StopReason.MIGRATE and state != ObservedState.SUCCEEDED:
        return Outcome(
            EndReason.MIGRATED,
            (*via_running, S.PREEMPTED, S.PENDING),
            "moved to cheaper or safer capacity",
            started=True,
        )
    if state == ObservedState.SUCCEEDED:
        return Outcome(
            EndReason.SUCCEEDED, (*via_running, S.SUCCEEDED), "trainer finished", started=True
        )
    if state == ObservedState.PREEMPTED:
        return Outcome(
            EndReason.PREEMPTED,
            (*via_running, S.PREEMPTED, S.PENDING),
            observation.message or "capacity was reclaimed; resuming from the last checkpoint",
            preempted=True,
            started=True,
        )
    if state == ObservedState.CANCELLED and stop_reason == StopReason.CANCEL:
        return Outcome(EndReason.CANCELLED, (S.CANCELLED,), "cancelled", started=True)
    if state == ObservedState.FAILED and code in CONFIG_ERROR_EXIT_CODES:
        detail = f": {observation.message}" if observation.message else ""
        return Outcome(
            EndReason.CONFIG_ERROR,
            (*via_running, S.FAILED),
            f"the job cannot run as specified (exit code {code}), not retried{detail}",
            failure=True,
            started=True,
        )
    # FAILED, LOST, or stopped by someone else: a failure, retried while restarts remain.
    what = f"exit code {code}" if code is not None else (observation.message or state.value)
    if code in PREEMPTED_EXIT_CODES:
        what += ", with no preemption notice"
    if code is not None and observation.message:
        what += f": {observation.message}"
    if restarts < max_restarts:
        return Outcome(
            EndReason.FAILED if state == ObservedState.FAILED else EndReason.LOST,
            (*via_running, S.PENDING),
            f"attempt failed ({what}); restart {restarts + 1} of {max_restarts}",
            failure=True,
            started=True,
        )
    return Outcome(
        EndReason.FAILED if state == ObservedState.FAILED else EndReason.LOST,
        (*via_running, S.FAILED),
        f"attempt failed ({what}); no restarts left",
        failure=True,
        started=True,
    )

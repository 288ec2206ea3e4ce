"""Why an attempt was asked to stop and why it ended: every such reason, named once.

The values are what `job_attempts.stop_reason` and `job_attempts.end_reason` store, what a
job's events carry as `end_reason` and what the API returns as an attempt's `end_reason`, so
they never change (a new name is a data migration). A reason is a value here and nowhere else
a string: `tests/test_reason_literals.py` fails on a reason's value typed as a literal outside
this module. It lives in the contract package because the CLI reads them too (worker -> api ->
gpujobs).

No wait reason is stored as a code: a waiting job is PENDING with its status reason in words;
the one wait with a name of its own, for budget, is the end of the attempt that led to it
(`EndReason.BUDGET_PAUSED`).
"""

from __future__ import annotations

from enum import StrEnum


class StopReason(StrEnum):
    """Why we asked an attempt to stop (`job_attempts.stop_reason`, at most 16 characters), so
    that its exit is read as what we asked for, not as a failure."""

    CANCEL = "cancel"  # its job was cancelled
    MIGRATE = "migrate"  # the scheduler moves its job to cheaper or safer capacity
    HANDOVER = "handover"  # a running attempt handing over to its standby
    STANDBY_STOP = "standby_stop"  # a standby no longer wanted (its job stopped running)
    STANDBY_STUCK = "standby_stuck"  # a standby whose trainer never waited
    WITHDRAWN = "withdrawn"  # a standby the rule no longer would hold (decide()'s Withdraw)
    NO_FIRST_REPORT = "no_first_report"  # its trainer never reported progress (worker.first_report)
    BUDGET_REJECT = "budget_reject"  # its team's budget: the job fails (on_budget_exceeded)
    BUDGET_DEFER = "budget_defer"  # its team's budget: the job waits for budget


class EndReason(StrEnum):
    """How an attempt ended (`job_attempts.end_reason`, at most 32 characters; in the job's
    events' data and the API's attempts)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # its trainer exited with an error
    LOST = "lost"  # the launcher lost it (or the launch never completed)
    PREEMPTED = "preempted"  # the cloud took the capacity back, with a notice
    NO_CAPACITY = "no_capacity"  # it never started: no capacity at its offer
    CANCELLED = "cancelled"  # stopped for StopReason.CANCEL
    CONFIG_ERROR = "config_error"  # the job cannot run as specified: not retried
    MIGRATED = "migrated"  # stopped for StopReason.MIGRATE
    HANDED_OVER = "handed_over"  # stopped for StopReason.HANDOVER, its standby took over
    STANDBY_STOPPED = "standby_stopped"  # a standby stopped for StopReason.STANDBY_STOP
    STANDBY_STUCK = "standby_stuck"  # a standby stopped for StopReason.STANDBY_STUCK
    WITHDRAWN = "withdrawn"  # a standby stopped for StopReason.WITHDRAWN
    NO_FIRST_REPORT = "no_first_report"  # stopped for StopReason.NO_FIRST_REPORT
    BUDGET_STOPPED = "budget_stopped"  # stopped for StopReason.BUDGET_REJECT
    BUDGET_PAUSED = "budget_paused"  # stopped for StopReason.BUDGET_DEFER: its job waits

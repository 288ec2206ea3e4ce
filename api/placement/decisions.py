"""What decide() returns, one per job that needs something done."""

from __future__ import annotations

from dataclasses import dataclass

from api.placement.plan import Plan


@dataclass(frozen=True, slots=True)
class Place:
    job_id: str
    plan: Plan
    reason: str


@dataclass(frozen=True, slots=True)
class Defer:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move a running job: checkpoint, stop the current attempt, then place as `to`."""

    job_id: str
    to: Place
    reason: str


@dataclass(frozen=True, slots=True)
class Standby:
    """Hold a standby attempt at `to` beside the running one (make-before-break): once it has
    capacity and its trainer waits, the running attempt checkpoints and it takes over from that
    step. The job keeps training meanwhile."""

    job_id: str
    to: Place
    reason: str


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Stop the standby held beside the running attempt before its handover: the rule that held
    it no longer would (the pool's learned lifetime fell, or the fallback to on-demand no longer
    fits after a handover). The job keeps training where it runs."""

    job_id: str
    attempt_id: str  # the standby judged, so a late pass cannot withdraw a newer one
    reason: str


@dataclass(frozen=True, slots=True)
class Unweighable:
    """A job decide() cannot weigh: a number of its state is out of bounds (a row written before
    gpujobs.progress's bounds held) or weighing it raised. It is left as it is (pending, or
    running where it runs) and every other job is decided as if it were not there."""

    job_id: str
    field: str  # what could not be weighed: `progress.samples_per_s`, `remaining_hours`, ...
    why: str

    @property
    def reason(self) -> str:
        return f"the scheduler cannot weigh this job: {self.field} {self.why}"


Decision = Place | Defer | Reject | Migrate | Standby | Withdraw | Unweighable

"""Budgets while jobs run: which running jobs must stop so that their team's spend stays within its
monthly budget. Pure: the reconciler reads the ledgers, asks `decide`, and stops what it names.

A running job commits more than it has spent: its trainer burns its attempt's price until the
next check (one reconcile tick) and, if that check stops it, until a later pass sees it gone and
closes the attempt (one more tick). So a running job holds at least its burn over CHECK_TICKS
ticks, or the rest of its quote if that is more (`running_hold`); budgets report that hold, and
admission and the scheduler count it. When a team's spend plus every hold passes its budget, its
running jobs are stopped, those that outran their quotes first, until the rest fit: stopped now,
the spend ends within the budget, where a job that understated `estimated_hours` would otherwise
run on past it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from api.money import MICRO, US_PER_HOUR, US_PER_SECOND, div_round

OnBudgetExceeded = Literal["reject", "defer"]  # gpujobs.spec.CapacitySpec.on_budget_exceeded

# How every reason for a budget stop begins (the job's events, its status reason).
BUDGET_EXCEEDED = "budget exceeded"
# Ticks a running job's burn is committed for: until the next check, then until its stop is seen.
CHECK_TICKS = 2


def tick_us(reconcile_interval_s: float) -> int:
    """One reconcile tick in microseconds (GPUJOBS_RECONCILE_INTERVAL_S)."""
    return round(reconcile_interval_s * US_PER_SECOND)


def burn_for(burn_microusd_per_hour: int, elapsed_us: int) -> int:
    return div_round(burn_microusd_per_hour * elapsed_us, US_PER_HOUR)


def running_hold(
    *, hold_microusd: int | None, spent_microusd: int, burn_microusd_per_hour: int, horizon_us: int
) -> int:
    """What an unfinished job still holds of its team's budget: the rest of its quote's hold
    (none without one), and while it runs never less than its burn over `horizon_us`."""
    quote_left = max(0, hold_microusd - spent_microusd) if hold_microusd is not None else 0
    return max(quote_left, burn_for(burn_microusd_per_hour, horizon_us))


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str
    priority: int
    started_at: datetime  # its open attempt's start
    burn_microusd_per_hour: int  # its open attempts' price
    spent_microusd: int  # by all its attempts so far
    hold_microusd: int | None  # its quote's hold, while it holds one
    on_budget_exceeded: OnBudgetExceeded
    stopping: bool = False  # a stop was already asked of its attempt

    def committed(self, horizon_us: int) -> int:
        return running_hold(
            hold_microusd=self.hold_microusd,
            spent_microusd=self.spent_microusd,
            burn_microusd_per_hour=self.burn_microusd_per_hour,
            horizon_us=horizon_us,
        )

    def outran(self, horizon_us: int) -> bool:
        """It burns past its quote's hold (or has none): the cause, so stopped first."""
        burned = self.spent_microusd + burn_for(self.burn_microusd_per_hour, horizon_us)
        return self.hold_microusd is None or burned > self.hold_microusd


@dataclass(frozen=True, slots=True)
class TeamLedger:
    team_id: str
    team_name: str
    budget_microusd: int
    spent_microusd: int  # this month, up to now
    waiting_held_microusd: int  # what its unfinished jobs that do not run still hold
    running: tuple[RunningJob, ...]


@dataclass(frozen=True, slots=True)
class Stop:
    job_id: str
    action: OnBudgetExceeded
    reason: str


def decide(teams: Iterable[TeamLedger], *, tick_us: int) -> list[Stop]:
    """The running jobs to stop, per team: none while spend plus holds fit the budget."""
    return [stop for team in teams for stop in _team_stops(team, tick_us=tick_us)]


def _team_stops(team: TeamLedger, *, tick_us: int) -> list[Stop]:
    horizon_us = CHECK_TICKS * tick_us
    # A job being stopped burns until its stop is seen, and its quote is released then.
    committed = {
        job.job_id: burn_for(job.burn_microusd_per_hour, tick_us)
        if job.stopping
        else job.committed(horizon_us)
        for job in team.running
    }
    total = team.spent_microusd + team.waiting_held_microusd + sum(committed.values())
    if total <= team.budget_microusd:
        return []
    candidates = sorted(
        (job for job in team.running if not job.stopping),
        key=lambda job: (
            not job.outran(horizon_us),
            job.priority,
            -job.started_at.timestamp(),  # the newest has the least work to lose
            job.job_id,
        ),
    )
    stops: list[Stop] = []
    left = total
    for job in candidates:
        if left <= team.budget_microusd:
            break
        stops.append(Stop(job.job_id, job.on_budget_exceeded, _reason(team, total, job)))
        left -= committed[job.job_id] - burn_for(job.burn_microusd_per_hour, tick_us)
    return stops


def _reason(team: TeamLedger, total: int, job: RunningJob) -> str:
    then = (
        "paused after a checkpoint; it resumes from it when the budget allows"
        if job.on_budget_exceeded == "defer"
        else "stopped after a checkpoint"
    )
    return (
        f"{BUDGET_EXCEEDED}: spent {_usd(team.spent_microusd)} of team {team.team_name!r}'s "
        f"{_usd(team.budget_microusd)} this month, with {_usd(total - team.spent_microusd)} more "
        f"held or burned by its running jobs before the next check; {then} "
        f"(capacity.on_budget_exceeded: {job.on_budget_exceeded})"
    )


def _usd(microusd: int) -> str:
    usd = microusd / MICRO
    return f"${usd:,.2f}" if abs(usd) >= 10 else f"${usd:,.3f}"

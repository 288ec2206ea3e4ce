"""What a running service had learned of a spot pool when a job arrives: the attempts of the
observation window before the job's submission, as a service that kept one spot job in that pool
would have made them, folded by the scheduler's own rule (api.placement.learning)."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from api.placement.learning import SpotAttempt, pool_history
from api.placement.world import OBSERVATION_WINDOW
from api.pricing.preemption import PreemptionPrior


def resident_attempts(
    available: np.ndarray, start: int, *, gap_hours: float, retry_seconds: float, epoch: datetime
) -> list[SpotAttempt]:
    """The window before tick `start`: one job runs spot while the pool has it; lost, it tries
    again at once, and after a launch that found no capacity, `retry_seconds` later (the
    production cadence); it stops at `start`. Tick t is `epoch + t * gap`."""
    gap_s = gap_hours * 3600.0

    def when(seconds: float) -> datetime:
        return epoch + timedelta(seconds=seconds)

    window_ticks = int(OBSERVATION_WINDOW.total_seconds() / gap_s)
    tick = max(0, start - window_ticks)
    running_since: float | None = None
    next_try = tick * gap_s
    attempts: list[SpotAttempt] = []
    while tick < start:
        up = bool(available[tick])
        if running_since is not None and not up:
            lost = when(tick * gap_s)
            attempts.append(
                SpotAttempt(when(running_since), when(running_since), lost, "preempted")
            )
            running_since, next_try = None, tick * gap_s
        if running_since is None and next_try < (tick + 1) * gap_s:
            tried = max(tick * gap_s, next_try)
            if up:
                running_since = tried
            else:
                attempts.append(SpotAttempt(when(tried), None, when(tried), "no_capacity"))
                next_try = tried + retry_seconds
                continue  # a retry may still fall within this tick
        tick += 1
    if running_since is not None:
        # The resident job steps aside at the submission: the replay does not simulate it on.
        end = when(start * gap_s)
        attempts.append(SpotAttempt(when(running_since), when(running_since), end, "stopped"))
    return attempts


def learned_before(
    available: np.ndarray,
    start: int,
    *,
    prior: PreemptionPrior,
    gap_hours: float,
    retry_seconds: float,
    epoch: datetime,
) -> tuple[PreemptionPrior, list[SpotAttempt]]:
    """The pool's posterior at tick `start` over the whole window, every sight alike (the
    snapshot's forecast_rates, what the quote reads), and the attempts."""
    now = epoch + timedelta(hours=start * gap_hours)
    attempts = resident_attempts(
        available, start, gap_hours=gap_hours, retry_seconds=retry_seconds, epoch=epoch
    )
    seen = pool_history(attempts, since=now - OBSERVATION_WINDOW, now=now)
    return seen.posterior(prior), attempts

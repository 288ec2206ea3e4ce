"""What the service learned of a spot pool from its own attempts in the observation window.

Three figures per pool: preemptions per spot-hour run (the preemption rate), and the outages it
saw, from a preemption or a launch that found no capacity to the next launch that found some
(the mean time to availability). Outages are measured in time, not counted in launches: a job
waiting for a pool tries it every few minutes, and counting each refusal as a sample of the
pool's availability made a pool that is up 95% of the time look up 15% of the time (measured on
the traces). An outage still open at the window's end counts its time but no recovery (the
exponential estimate with right-censoring: events over exposure).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class SpotAttempt:
    tried_at: datetime  # when the launch was asked for
    started_at: datetime | None  # None: it never ran
    ended_at: datetime | None  # None: still running (or still launching)
    end_reason: str | None  # "preempted", "no_capacity", ...


@dataclass(frozen=True, slots=True)
class PoolHistory:
    preemptions: int = 0
    spot_hours: float = 0.0
    outage_hours: float = 0.0
    recoveries: int = 0  # outages that ended with a launch that found capacity

    @property
    def empty(self) -> bool:
        return not (self.preemptions or self.spot_hours or self.outage_hours or self.recoveries)


def _hours(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds() / 3600.0)


def pool_history(attempts: Iterable[SpotAttempt], *, since: datetime, now: datetime) -> PoolHistory:
    """One pool's attempts (any that overlap [since, now]) folded into its history."""
    preemptions, spot_hours = 0, 0.0
    events: list[tuple[datetime, bool]] = []  # (when, capacity found) in time order
    for a in attempts:
        if a.started_at is not None:
            end = min(a.ended_at or now, now)
            spot_hours += _hours(max(a.started_at, since), end)
            events.append((a.tried_at, True))
            if a.end_reason == "preempted" and a.ended_at is not None and a.ended_at >= since:
                preemptions += 1
                events.append((a.ended_at, False))
        elif a.end_reason == "no_capacity":
            events.append((a.ended_at or a.tried_at, False))
    outage_hours, recoveries = 0.0, 0
    down_since: datetime | None = None
    for when, found in sorted(events, key=lambda e: e[0]):
        if found and down_since is not None:
            if when >= since:
                outage_hours += _hours(max(down_since, since), when)
                recoveries += 1
            down_since = None
        elif not found and down_since is None:
            down_since = when
    if down_since is not None:
        outage_hours += _hours(max(down_since, since), now)
    return PoolHistory(preemptions, spot_hours, outage_hours, recoveries)

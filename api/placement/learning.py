"""What the service learned of a spot pool from its own attempts in the observation window.

Three figures per pool: preemptions per spot-hour run (the preemption rate), and the outages it
saw, from a preemption or a launch that found no capacity to the next attempt found running (the
mean time to availability). Outages are measured in time, not counted in launches: a job waiting
for a pool tries it every few minutes, and counting each refusal as a sample of the pool's
availability made a pool that is up 95% of the time look up 15% of the time (measured on the
traces). What is known of an outage is bounded by the evidence: it ended somewhere between the
last time it was seen (a refusal) and the first time capacity was seen again, so it counts to the
midpoint of that gap (interval censoring); one still open counts to the last time it was seen,
with no recovery (right censoring: events over exposure). While any attempt of the pool runs, the
pool has capacity: another job's refusal or preemption then begins no outage.

Jobs side by side in one pool watch the same pool, and it is counted once: its spot hours are
the hours in which some attempt held capacity (the union of their runs, not the sum), and a
preemption counts as the share it took of the attempts then holding capacity, those lost within
a reclaim's notice of each other (`SEEN_TOGETHER`) together. A reclaim that took every job is
one preemption; N jobs losing their nodes one by one count 1/N each. Either way the pool's rate
is what one job in it sees. Counting every job's copy made a pool that N jobs ran in look N
times as well known when they went together: the posterior left its prior behind on the
evidence of one outage (the busy service's jobs paid 0.57% more for sharing what they saw,
benchmarks/spot/busy.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from api.pricing.preemption import PreemptionPrior, posterior
from gpujobs.reasons import EndReason

# Ended so without ever having held capacity: a launch that never completed.
NEVER_RAN = frozenset({EndReason.LOST, EndReason.NO_CAPACITY})
# The pods of one reclaim are told together and end within its notice (AWS gives two minutes,
# GCP and Azure less), each when its checkpoint is saved: preemptions of a pool each this close
# to the one before are one reclaim, seen by several jobs.
SEEN_TOGETHER = timedelta(minutes=2)


@dataclass(frozen=True, slots=True)
class SpotAttempt:
    tried_at: datetime  # when the launch was asked for
    started_at: datetime | None  # None: it never ran
    ended_at: datetime | None  # None: still running (or still launching)
    end_reason: str | None  # an EndReason


@dataclass(frozen=True, slots=True)
class PoolHistory:
    preemptions: float = 0.0  # weighted by age (pool_history's half_life), so not a count
    spot_hours: float = 0.0
    outage_hours: float = 0.0
    recoveries: float = 0.0  # outages that ended with capacity seen again (weighted)

    @property
    def empty(self) -> bool:
        return not (self.preemptions or self.spot_hours or self.outage_hours or self.recoveries)

    def posterior(self, prior: PreemptionPrior) -> PreemptionPrior:
        """The pool's prior moved by this history (the prior itself when nothing was seen)."""
        return posterior(
            prior,
            preemptions=self.preemptions,
            spot_hours=self.spot_hours,
            outage_hours=self.outage_hours,
            recoveries=self.recoveries,
        )


def _merged(spans: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Overlapping [start, end) spans joined, in time order."""
    out: list[tuple[datetime, datetime]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _reclaims(
    preempted: list[tuple[datetime, datetime]], ran: list[tuple[datetime, datetime]]
) -> list[tuple[datetime, datetime, float]]:
    """Preempted runs (start, end) grouped into reclaims: a run that held capacity when a reclaim
    began (its first end) and ended within SEEN_TOGETHER of its last end so far went with it.
    Each reclaim as (first end, last end, the share it took of the runs in `ran` holding capacity
    when it began)."""
    starts, ends = sorted(start for start, _ in ran), sorted(end for _, end in ran)
    groups: list[tuple[datetime, datetime, int]] = []  # first end, last end, runs taken
    for start, end in sorted(preempted, key=lambda run: (run[1], run[0])):
        if groups and start < groups[-1][0] and end - groups[-1][1] <= SEEN_TOGETHER:
            first, _, taken = groups[-1]
            groups[-1] = (first, end, taken + 1)
        else:
            groups.append((end, end, 1))
    out = []
    for first, final, taken in groups:
        holding = bisect_left(starts, first) - bisect_left(ends, first)  # start < first <= end
        out.append((first, final, taken / max(taken, holding)))
    return out


def _hours(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds() / 3600.0)


class _Age:
    """Evidence weighted by its age: 2^(-age / half_life), 1 for all ages without one."""

    def __init__(self, now: datetime, half_life: timedelta | None) -> None:
        if half_life is not None and half_life <= timedelta(0):
            raise ValueError("a half-life is positive; None weighs every sight alike")
        self.now = now
        self.rate = math.log(2.0) / (half_life.total_seconds() / 3600.0) if half_life else 0.0

    def at(self, t: datetime) -> float:
        """The weight of an event at t."""
        return math.exp(-self.rate * _hours(t, self.now))

    def span(self, a: datetime, b: datetime) -> float:
        """The weighted hours of [a, b]: the integral of the weight over it."""
        if b <= a:
            return 0.0
        if not self.rate:
            return _hours(a, b)
        return (self.at(b) - self.at(a)) / self.rate


def pool_history(
    attempts: Iterable[SpotAttempt],
    *,
    since: datetime,
    now: datetime,
    half_life: timedelta | None = None,
) -> PoolHistory:
    """One pool's attempts (any that overlap [since, now]) folded into its history, the pool
    counted once however many jobs watched it; with a half_life, each hour run, preemption,
    hour of outage and recovery weighs 2^(-age / half_life), so a pool seen poor days ago
    drifts back to its prior (learned_rates: EVIDENCE_HALF_LIFE)."""
    age = _Age(now, half_life)
    ran: list[tuple[datetime, datetime]] = []  # when some attempt held capacity
    downs: list[datetime] = []  # when capacity was seen gone
    preempted: list[tuple[datetime, datetime]] = []
    for a in attempts:
        if a.started_at is not None and a.end_reason not in NEVER_RAN:
            ran.append((a.started_at, min(a.ended_at or now, now)))
            if a.end_reason == EndReason.PREEMPTED and a.ended_at is not None:
                downs.append(a.ended_at)
                preempted.append((a.started_at, a.ended_at))
        elif a.end_reason == EndReason.NO_CAPACITY:
            downs.append(a.ended_at or a.tried_at)

    held = _merged(ran)
    spot_hours = sum(age.span(max(start, since), end) for start, end in held)
    preemptions = sum(
        share * age.at(first) for first, last, share in _reclaims(preempted, ran) if last >= since
    )
    starts = [start for start, _ in held]

    def running(t: datetime) -> bool:
        i = bisect_right(starts, t) - 1
        return i >= 0 and t < held[i][1]

    events = [(t, False) for t in downs if not running(t)] + [(start, True) for start, _ in ran]
    outage_hours, recoveries = 0.0, 0.0
    began: datetime | None = None  # the outage under way: when it began, when last seen
    seen: datetime | None = None
    for when, up in sorted(events):  # in time order; at the same time, down before up
        if not up:
            began, seen = (when, when) if began is None else (began, when)
        elif began is not None and seen is not None:
            end = seen + (when - seen) / 2
            if end >= since:
                outage_hours += age.span(max(began, since), end)
                recoveries += age.at(end)
            began = seen = None
    if began is not None and seen is not None:
        outage_hours += age.span(max(began, since), seen)
    return PoolHistory(preemptions, spot_hours, outage_hours, recoveries)

"""One job's situation at one moment: the options decide() weighs and the deadline's terms.

decide(), the quote's simulation of decide() and the estimate all start here, so that they weigh
the same spot, on-demand and waiting pool, with the same hours left, window, work and prices.
The simulation only replaces what changes over time (hours left, work left, what runs, whether
spot is there): `Situation.view`.

Work is counted in hours of running on the on-demand fallback's GPU, its checkpoint stalls
included (what the deadline must leave room for); a spot GPU of another model takes `spot_pace`
times as long. Without an on-demand fallback (only the quote needs one then), the spot GPU's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from api.placement.options import Market, Option, first, running_hours
from api.placement.slack import Choice, SlackView
from api.placement.snapshot import JobState
from gpujobs.spec import CapacityType


def hours_until(at: datetime | None, now: datetime) -> float | None:
    """Hours from `now` to a deadline; None without one."""
    return (at - now).total_seconds() / 3600.0 if at is not None else None


@dataclass(frozen=True, slots=True)
class Terms:
    """The deadline rule's constants for one situation (SlackView's fields that do not change
    while the job runs or waits)."""

    window_hours: float  # deadline - submission
    initial_slack: float  # window - total work - one restart
    running_per_work: float  # running hours per hour of work on the fallback (stalls included)
    restart_hours: float
    step_hours: float
    spot_lifetime_hours: float
    price_ratio: float  # on-demand / spot, per hour of work
    spot_outage_hours: float
    spot_pace: float


@dataclass(frozen=True, slots=True)
class Situation:
    job: JobState
    now: datetime
    hours_left: float | None
    restart_hours: float
    step_hours: float | None  # decide()'s reaction time; None: the caller's own resolution
    spot: Option | None  # the spot option usable now
    pool: Option | None  # the spot pool the job runs on or waits for: `spot`, else the first short
    on_demand: Option | None
    standby: bool = False  # a standby may be held beside on-demand (Snapshot.standby)

    @property
    def unit(self) -> float:
        """Pace of the GPU work is counted on: the on-demand fallback's, else the pool's."""
        if self.on_demand is not None:
            return self.on_demand.pace
        return self.pool.pace if self.pool is not None else 1.0

    def terms(self, *, step_hours: float | None = None) -> Terms:
        job, od, pool = self.job, self.on_demand, self.pool
        unit = self.unit
        per_work = running_hours(job, od, 1.0) if od is not None else 1.0
        spot_pace = pool.pace / unit if pool is not None else 1.0
        if job.deadline_at is not None:
            window = (job.deadline_at - job.submitted_at).total_seconds() / 3600.0
            # an estimate longer than the measured rate says is kept: the deadline was set by it
            total = max(job.spec.estimated_hours or 0.0, job.remaining_hours) * unit
        else:
            window = self.hours_left or 0.0
            total = job.remaining_hours * unit
        # per hour of work: a slower spot GPU saves less than its price says
        spot_price = pool.price_per_hour * spot_pace if pool is not None else None
        ratio = (
            od.price_per_hour / spot_price
            if od is not None and spot_price is not None and spot_price > 0
            else 1.0
        )
        step = step_hours if step_hours is not None else self.step_hours
        return Terms(
            window_hours=window,
            initial_slack=window - total * per_work - self.restart_hours,
            running_per_work=per_work,
            restart_hours=self.restart_hours,
            step_hours=step if step is not None else 0.0,
            # No pool: nothing to wait for, and a lifetime of 0 says so to the reserve.
            spot_lifetime_hours=pool.lifetime_hours if pool is not None else 0.0,
            price_ratio=ratio,
            spot_outage_hours=pool.risk.mtta_hours if pool is not None else math.inf,
            spot_pace=spot_pace,
        )

    def view(
        self,
        terms: Terms,
        *,
        hours_left: float,
        work: float,
        on: Choice,
        changeover_left: float,
        spot_available: bool,
        on_hours: float,
        spot_held: bool = False,
    ) -> SlackView:
        """The rule's view at one moment; `work` in hours of the unit GPU, stalls excluded."""
        return SlackView(
            hours_left=hours_left,
            work_left=work * terms.running_per_work,
            on=on,
            changeover_left=changeover_left,
            spot_available=spot_available,
            restart_hours=terms.restart_hours,
            step_hours=terms.step_hours,
            initial_slack=terms.initial_slack,
            window_hours=terms.window_hours,
            spot_lifetime_hours=terms.spot_lifetime_hours,
            price_ratio=terms.price_ratio,
            spot_outage_hours=terms.spot_outage_hours,
            on_hours=on_hours,
            spot_pace=terms.spot_pace,
            spot_held=spot_held,
        )


def situation(market: Market, job: JobState, now: datetime) -> Situation:
    """What decide() weighs for `job` at `now`: spot and on-demand that can still finish in time
    (market.in_time), and the pool it waits for when spot is out."""
    snap = market.snapshot
    allowed = job.spec.capacity.types
    hours_left = hours_until(job.deadline_at, now)
    spot = pool = od = None
    if CapacityType.SPOT in allowed:
        spot = market.in_time(job, market.spot(job), hours_left=hours_left)
        pool = spot or first(market.spot(job), waiting=True)
    if CapacityType.ON_DEMAND in allowed:
        od = market.in_time(job, market.on_demand(job), hours_left=hours_left)
    return Situation(
        job=job,
        now=now,
        hours_left=hours_left,
        restart_hours=snap.restart_hours,
        step_hours=snap.step_hours,
        spot=spot,
        pool=pool,
        on_demand=od,
        standby=snap.standby,
    )

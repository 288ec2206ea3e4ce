"""Spend from the attempts ledger: pure functions over rows, no database.

Money is integer micro-dollars throughout. An attempt's cost over any slice of its run is
`C(t1) - C(t0)` for one cumulative function `C`, so slices (days, the period's edges) always add
up to the whole, exactly:

- a closed attempt with `cost_microusd`: its recorded cost, pro-rated linearly over its run;
- a running attempt (or a closed one without a recorded cost): `price_per_hour`, by elapsed time,
  counted up to `now`.

Lost work: for an attempt that ended `preempted`, the run time between its last checkpoint and
the preemption. With the step counters (`resume_from_step`, `end_step`, `steps_lost`) it is
`steps_lost / steps run x run time`; with only `checkpoint_every_seconds` it is one checkpoint
interval (the most a preemption can lose, so waste is never understated); with neither, zero.
It is attributed to the period and group of the preemption itself.

Wasted work: an attempt that ended `config_error` (the job could not run as specified) ran for
nothing; all of its time and cost are reported as wasted, slice by slice like its cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from api.money import (
    US_PER_HOUR,
    US_PER_SECOND,
    cost_to,
    div_round,
    elapsed_us,
    microusd_per_hour,
)
from api.pricing.offers import Placement
from gpujobs.reasons import EndReason
from gpujobs.usage import UsageGroup, UsageGroupBy


@dataclass(frozen=True)
class LedgerRow:
    """One attempt, as the aggregation needs it."""

    team: str
    job_id: str
    job_name: str
    placement: Placement  # the attempt's: what it ran on, at what price
    started_at: datetime | None
    ended_at: datetime | None
    end_reason: str | None = None
    cost_microusd: int | None = None
    resume_from_step: int | None = None
    end_step: int | None = None
    steps_lost: int | None = None
    checkpoint_every_seconds: float | None = None


@dataclass(frozen=True)
class _Run:
    """One attempt's run: start, effective end, and its cumulative cost functions."""

    row: LedgerRow
    start: datetime
    end: datetime

    @property
    def gpus(self) -> int:
        return self.row.placement.gpus

    def cost_to(self, t: datetime) -> int:
        return cost_to(
            t,
            started_at=self.start,
            end=self.end,
            closed=self.row.ended_at is not None,
            recorded_microusd=self.row.cost_microusd,
            price_per_hour=self.row.placement.price_per_hour,
        )

    def on_demand_cost_to(self, t: datetime) -> int:
        elapsed = elapsed_us(min(t, self.end) - self.start)
        rate = microusd_per_hour(self.row.placement.on_demand_price_per_hour)
        return div_round(rate * elapsed, US_PER_HOUR)

    def gpu_hours(self, t0: datetime, t1: datetime) -> float:
        return self.gpus * elapsed_us(t1 - t0) / US_PER_HOUR

    def lostelapsed_us(self) -> int:
        row = self.row
        duration = elapsed_us(self.end - self.start)
        if row.steps_lost is not None and row.end_step is not None:
            ran = row.end_step - (row.resume_from_step or 0)
            if row.steps_lost <= 0:
                return 0
            if ran > 0:
                return min(duration, duration * min(row.steps_lost, ran) // ran)
        if row.steps_lost == 0:
            return 0
        if row.checkpoint_every_seconds:
            return min(duration, round(row.checkpoint_every_seconds * US_PER_SECOND))
        return 0


@dataclass
class _Totals:
    label: str | None = None
    attempts: set[int] = field(default_factory=set)
    running: set[int] = field(default_factory=set)
    gpu_hours: float = 0.0
    cost: int = 0
    on_demand: int = 0
    preemptions: int = 0
    lost_gpu_hours: float = 0.0
    lost_cost: int = 0
    wasted_gpu_hours: float = 0.0
    wasted_cost: int = 0
    by_capacity: dict[str, int] = field(default_factory=dict)

    def result(self, key: str) -> UsageGroup:
        return UsageGroup(
            key=key,
            label=self.label,
            attempts=len(self.attempts),
            running=len(self.running),
            gpu_hours=round(self.gpu_hours, 6),
            cost_microusd=self.cost,
            on_demand_cost_microusd=self.on_demand,
            preemptions=self.preemptions,
            lost_gpu_hours=round(self.lost_gpu_hours, 6),
            lost_cost_microusd=self.lost_cost,
            wasted_gpu_hours=round(self.wasted_gpu_hours, 6),
            wasted_cost_microusd=self.wasted_cost,
            cost_microusd_by_capacity_type=dict(sorted(self.by_capacity.items())),
        )


KeyFn = Callable[[LedgerRow, datetime], tuple[str, str | None]]

_KEYS: dict[UsageGroupBy, KeyFn] = {
    UsageGroupBy.TEAM: lambda row, _: (row.team, None),
    UsageGroupBy.JOB: lambda row, _: (row.job_id, row.job_name),
    UsageGroupBy.INSTANCE_TYPE: lambda row, _: (row.placement.instance_type, None),
    UsageGroupBy.CAPACITY_TYPE: lambda row, _: (row.placement.capacity_type.value, None),
    UsageGroupBy.DAY: lambda _, at: (at.date().isoformat(), None),
}


def _day_slices(t0: datetime, t1: datetime) -> Iterator[tuple[datetime, datetime]]:
    """[t0, t1) cut at UTC midnights."""
    while t0 < t1:
        midnight = t0.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
        cut = min(midnight, t1)
        yield t0, cut
        t0 = cut


def aggregate(
    rows: Iterable[LedgerRow],
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    group_by: UsageGroupBy,
) -> tuple[list[UsageGroup], UsageGroup]:
    """Per-group and total usage of `rows` clipped to [start, end), running attempts up to now."""
    key_of = _KEYS[group_by]
    groups: dict[str, _Totals] = {}
    total = _Totals()

    def bucket(row: LedgerRow, at: datetime) -> list[_Totals]:
        key, label = key_of(row, at)
        totals = groups.setdefault(key, _Totals(label=label))
        return [totals, total]

    for index, row in enumerate(rows):
        if row.started_at is None:
            if row.ended_at is not None and _preempted_in(row, start, end):
                for totals in bucket(row, row.ended_at):
                    totals.preemptions += 1
            continue
        run = _Run(row=row, start=row.started_at, end=max(row.started_at, row.ended_at or now))
        t0, t1 = max(run.start, start), min(run.end, end)
        slices = _day_slices(t0, t1) if group_by == UsageGroupBy.DAY else [(t0, t1)]
        for a, b in slices if t0 < t1 else []:
            cost = run.cost_to(b) - run.cost_to(a)
            for totals in bucket(row, a):
                totals.attempts.add(index)
                if row.ended_at is None:
                    totals.running.add(index)
                totals.gpu_hours += run.gpu_hours(a, b)
                totals.cost += cost
                totals.on_demand += run.on_demand_cost_to(b) - run.on_demand_cost_to(a)
                capacity = row.placement.capacity_type.value
                totals.by_capacity[capacity] = totals.by_capacity.get(capacity, 0) + cost
                if row.end_reason == EndReason.CONFIG_ERROR:
                    totals.wasted_gpu_hours += run.gpu_hours(a, b)
                    totals.wasted_cost += cost
        if _preempted_in(row, start, end):
            _add_lost_work(run, start=start, into=bucket(row, run.end))
    ordered = sorted(groups.items(), key=_order(group_by))
    return [totals.result(key) for key, totals in ordered], total.result("total")


def _preempted_in(row: LedgerRow, start: datetime, end: datetime) -> bool:
    return (
        row.end_reason == EndReason.PREEMPTED
        and row.ended_at is not None
        and start <= row.ended_at < end
    )


def _add_lost_work(run: _Run, *, start: datetime, into: list[_Totals]) -> None:
    lost_from = max(run.end - timedelta(microseconds=run.lostelapsed_us()), start, run.start)
    lost_cost = run.cost_to(run.end) - run.cost_to(lost_from)
    for totals in into:
        totals.preemptions += 1
        totals.lost_gpu_hours += run.gpu_hours(lost_from, run.end)
        totals.lost_cost += lost_cost


def _order(group_by: UsageGroupBy) -> Callable[[tuple[str, _Totals]], tuple[int, str]]:
    if group_by == UsageGroupBy.DAY:
        return lambda item: (0, item[0])
    return lambda item: (-item[1].cost, item[0])

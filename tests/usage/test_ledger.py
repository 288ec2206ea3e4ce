"""The pure aggregation over ledger rows: no database, explicit `now`."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from api.money import cost_microusd
from api.placement import Placement
from api.usage.ledger import LedgerRow, aggregate
from gpujobs.spec import CapacityType
from gpujobs.usage import UsageGroupBy

T0 = datetime(2025, 6, 10, tzinfo=UTC)
H = timedelta(hours=1)


def row(**fields: Any) -> LedgerRow:
    """A ledger row; fields named like a Placement field (price_per_hour...) go there."""
    where: dict[str, Any] = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instance_type": "g5.xlarge",
        "gpu_model": "A10G",
        "gpu_count": 1,
        "nodes": 1,
        "capacity_type": CapacityType.SPOT,
        "price_per_hour": 1.0,
        "on_demand_price_per_hour": 3.0,
    }
    where.update(
        {k: CapacityType(v) if k == "capacity_type" else v for k, v in fields.items() if k in where}
    )
    base: dict[str, Any] = {
        "team": "t",
        "job_id": "j",
        "job_name": "job",
        "placement": Placement(**where),
        "started_at": T0,
        "ended_at": T0 + H,
    }
    rest = {k: v for k, v in fields.items() if k not in where}
    return LedgerRow(**(base | rest))


def total(rows: list[LedgerRow], *, now: datetime, group_by: UsageGroupBy = UsageGroupBy.TEAM):
    _, result = aggregate(rows, start=T0 - 24 * H, end=T0 + 48 * H, now=now, group_by=group_by)
    return result


def test_a_running_attempt_counts_to_now_by_the_second() -> None:
    running = row(price_per_hour=3.6, ended_at=None, gpu_count=2, nodes=2)
    result = total([running], now=T0 + timedelta(seconds=1234))
    assert result.cost_microusd == 1_234_000  # $3.60/h is $0.001/s
    assert result.on_demand_cost_microusd == 1_028_333  # $3.00/h for 1234 s, rounded
    assert result.running == 1
    assert abs(result.gpu_hours - 4 * 1234 / 3600) < 1e-6


def test_an_attempt_without_a_recorded_cost_is_priced_from_its_rate() -> None:
    closed = row(price_per_hour=2.5, ended_at=T0 + 90 * timedelta(minutes=1), cost_microusd=None)
    assert total([closed], now=T0 + 10 * H).cost_microusd == 3_750_000
    started, ended = T0, T0 + timedelta(minutes=90)
    assert cost_microusd(price_per_hour=2.5, started_at=started, ended_at=ended) == 3_750_000


def test_a_recorded_cost_wins_over_the_price() -> None:
    closed = row(price_per_hour=2.5, cost_microusd=1_111_111)
    assert total([closed], now=T0 + 10 * H).cost_microusd == 1_111_111


def test_lost_work_from_steps_then_checkpoint_interval_then_nothing() -> None:
    now = T0 + 10 * H
    preempted = {"end_reason": "preempted", "cost_microusd": 1_000_000, "gpu_count": 4}
    by_steps = row(**preempted, resume_from_step=100, end_step=500, steps_lost=100)
    assert total([by_steps], now=now).lost_cost_microusd == 250_000
    assert total([by_steps], now=now).lost_gpu_hours == 1.0
    by_interval = row(**preempted, checkpoint_every_seconds=900)
    assert total([by_interval], now=now).lost_cost_microusd == 250_000
    nothing_known = row(**preempted)
    assert total([nothing_known], now=now).lost_cost_microusd == 0
    assert total([nothing_known], now=now).preemptions == 1
    nothing_lost = row(**preempted, steps_lost=0, checkpoint_every_seconds=900)
    assert total([nothing_lost], now=now).lost_cost_microusd == 0


def test_lost_work_never_exceeds_the_attempt() -> None:
    greedy = row(
        end_reason="preempted", cost_microusd=1_000_000, checkpoint_every_seconds=7 * 24 * 3600
    )
    assert total([greedy], now=T0 + 10 * H).lost_cost_microusd == 1_000_000


def test_days_and_groups_always_add_up_exactly() -> None:
    rng = random.Random(7)
    rows = []
    for i in range(60):
        start = T0 + timedelta(seconds=rng.randrange(0, 40 * 3600))
        end = start + timedelta(seconds=rng.randrange(1, 30 * 3600))
        rows.append(
            row(
                team=f"t{i % 3}",
                job_id=f"j{i % 7}",
                capacity_type=rng.choice(["spot", "on_demand", "reserved"]),
                price_per_hour=rng.uniform(0.1, 40),
                on_demand_price_per_hour=rng.uniform(0.1, 40),
                started_at=start,
                ended_at=None if i % 9 == 0 else end,
                cost_microusd=None if i % 4 == 0 else rng.randrange(1, 10**9),
                end_reason="preempted" if i % 5 == 0 else "succeeded",
                steps_lost=rng.randrange(0, 50),
                end_step=100,
            )
        )
    now = T0 + 50 * H
    totals = {}
    for group_by in UsageGroupBy:
        groups, result = aggregate(
            rows, start=T0 + 3 * H, end=T0 + 45 * H, now=now, group_by=group_by
        )
        assert sum(g.cost_microusd for g in groups) == result.cost_microusd
        assert sum(g.on_demand_cost_microusd for g in groups) == result.on_demand_cost_microusd
        assert sum(g.lost_cost_microusd for g in groups) == result.lost_cost_microusd
        totals[group_by] = (
            result.cost_microusd,
            result.on_demand_cost_microusd,
            result.preemptions,
        )
    assert len(set(totals.values())) == 1


def test_groups_are_ordered_by_cost_and_days_by_date() -> None:
    rows = [
        row(job_id="cheap", cost_microusd=1),
        row(job_id="dear", cost_microusd=100, started_at=T0 + 30 * H, ended_at=T0 + 31 * H),
    ]
    now = T0 + 40 * H
    by_job, _ = aggregate(rows, start=T0, end=now, now=now, group_by=UsageGroupBy.JOB)
    assert [g.key for g in by_job] == ["dear", "cheap"]
    by_day, _ = aggregate(rows, start=T0, end=now, now=now, group_by=UsageGroupBy.DAY)
    assert [g.key for g in by_day] == ["2025-06-10", "2025-06-11"]


def test_an_attempt_ended_by_a_configuration_error_is_wasted_in_full() -> None:
    wasted = row(end_reason="config_error", gpu_count=2, ended_at=T0 + H / 2, cost_microusd=500_000)
    useful = row(job_id="k", end_reason="succeeded", started_at=T0 + H, ended_at=T0 + 2 * H)
    groups, result = aggregate(
        [wasted, useful],
        start=T0 - 24 * H,
        end=T0 + 48 * H,
        now=T0 + 3 * H,
        group_by=UsageGroupBy.JOB,
    )
    assert result.wasted_gpu_hours == 1.0  # 2 GPUs x half an hour
    assert result.wasted_cost_microusd == 500_000
    assert result.cost_microusd == 500_000 + 1_000_000  # wasted time is still billed
    by_job = {group.key: group for group in groups}
    assert by_job["j"].wasted_cost_microusd == 500_000
    assert by_job["k"].wasted_cost_microusd == 0
    # Sliced by day, the wasted parts add up to the whole.
    days, _ = aggregate(
        [row(end_reason="config_error", started_at=T0 - H, ended_at=T0 + H)],
        start=T0 - 24 * H,
        end=T0 + 48 * H,
        now=T0 + 3 * H,
        group_by=UsageGroupBy.DAY,
    )
    assert [d.wasted_cost_microusd for d in days] == [1_000_000, 1_000_000]

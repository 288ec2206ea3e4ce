"""What the benchmarks' running service had seen of a pool before a job, and how the adapter of
decide() learns from it: the scheduler's own learning (api.placement.learning), not a copy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from api.placement.learning import SpotAttempt, pool_history
from api.pricing.preemption import PreemptionPrior
from benchmarks.spot.adapter import SIM_EPOCH, OursPolicy
from benchmarks.spot.observed import learned_before, resident_attempts
from benchmarks.spot.simulator import Setting, simulate

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_resident_job_sees_each_preemption_each_refusal_and_each_return() -> None:
    # 1 h ticks: up 3 h, out 3 h, up 2 h; a refused launch is retried 1.5 h later.
    available = np.array([1, 1, 1, 0, 0, 0, 1, 1], dtype=bool)
    attempts = resident_attempts(available, 8, gap_hours=1.0, retry_seconds=5400, epoch=T0)
    h = [T0 + timedelta(hours=x) for x in (0, 3, 4.5, 6)]
    assert attempts == [
        SpotAttempt(h[0], h[0], h[1], "preempted"),
        SpotAttempt(h[1], None, h[1], "no_capacity"),  # at once, on the preemption
        SpotAttempt(h[2], None, h[2], "no_capacity"),  # 1.5 h later
        SpotAttempt(h[3], h[3], T0 + timedelta(hours=8), "stopped"),  # back; stops at 8 h
    ]
    seen = pool_history(attempts, since=T0, now=T0 + timedelta(hours=8))
    assert (seen.preemptions, seen.recoveries) == (1, 1)
    # Out from 3 h, last seen out at 4.5 h, seen back at 6 h: the outage ended about 5.25 h.
    assert seen.spot_hours == pytest.approx(5.0) and seen.outage_hours == pytest.approx(2.25)


def test_the_adapter_starts_from_what_the_service_saw_and_keeps_learning() -> None:
    prior = PreemptionPrior(1.0, 10.0, mtta_hours=5.0, availability=0.67)
    # A week of a pool up 95% of the time in short outages: spot comes back fast.
    week = np.array(([1] * 19 + [0]) * 8 * 21, dtype=bool)[: 7 * 24 * 2]
    setting = Setting(work=10, deadline=20, changeover=1, spot_tick_cost=0.5, od_tick_cost=1.5,
                      gap_hours=0.5)  # fmt: skip
    learned, seen = learned_before(
        week, len(week), prior=prior, gap_hours=0.5, retry_seconds=300,
        epoch=SIM_EPOCH - timedelta(hours=len(week) * 0.5),
    )  # fmt: skip
    assert learned.mtta_hours < prior.mtta_hours / 2
    # learned_before folds the week alike (the quote's forecast); the adapter as decide() does,
    # each sight weighed by its age: the same attempts, the same fold with half_life=None
    policy = OursPolicy("us-east-1a_v100_1", setting, prior=prior, seen=[seen], half_life=None)
    start = policy._rates(SIM_EPOCH)[(policy.offer.zone, policy.offer.instance_type)]
    assert start == learned
    aged = OursPolicy("us-east-1a_v100_1", setting, prior=prior, seen=[seen])
    assert aged._rates(SIM_EPOCH)[(aged.offer.zone, aged.offer.instance_type)] != learned
    # The job's own preemptions move the rate on: spot lost every other tick.
    flaky = np.array([1, 0] * 40, dtype=bool)
    result = simulate(flaky, 0, setting, policy)
    assert result.met_deadline
    end = policy._rates(SIM_EPOCH + timedelta(hours=20))
    assert end[(policy.offer.zone, policy.offer.instance_type)].rate > learned.rate

"""The weighing of a pool's evidence by age, as the spot benchmarks replay it."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from api.placement.world import EVIDENCE_HALF_LIFE
from api.pricing.preemption import PreemptionPrior
from benchmarks.spot.adapter import SIM_EPOCH, OursPolicy
from benchmarks.spot.experiment import JOB_FRACTIONS, _seen, _starts, job_setting
from benchmarks.spot.half_life import run
from benchmarks.spot.policies import uniform_progress_policy
from benchmarks.spot.simulator import Cadence, load_trace, simulate
from tests.benchmarks.spot_scripts import setting

NAME = "us-west-2a_v100_1"


def test_a_pool_seen_poor_before_a_quiet_day_is_judged_nearer_its_prior() -> None:
    """A week of a pool lost every other hour, then a day out (only refusals seen): weighed by
    age, the job starts from a longer lifetime than the week alike gives, short of the prior's."""
    prior = PreemptionPrior(alpha=2.0, beta=20.0, mtta_hours=0.5, availability=0.9)
    s = setting(work=10, deadline=20, d=1)  # 1 h ticks
    week = np.array([1, 0] * 84 + [0] * 24, dtype=bool)  # the last day out
    seen = _seen(week, len(week), s)
    lifetimes = []
    for half_life in (None, timedelta(hours=12)):
        policy = OursPolicy(NAME, s, prior=prior, seen=seen, half_life=half_life)
        pool = (policy.offer.zone, policy.offer.instance_type)
        lifetimes.append(policy._rates(SIM_EPOCH)[pool].mean_lifetime_hours)
    alike, aged = lifetimes
    assert alike < aged < prior.mean_lifetime_hours


def test_the_result_file_compares_each_half_life_with_uniform_progress(tmp_path: Path) -> None:
    folder = tmp_path / "spot-traces" / "availability" / "1-node" / "aws-10-26-2022"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    data = [int(x) for x in np.repeat(rng.random(60) < 0.7, 8)]  # 480 ticks of 600 s
    (folder / f"{NAME}.json").write_text(
        json.dumps({"metadata": {"gap_seconds": 600}, "data": data})
    )
    result = run(tmp_path, starts=1, workers=1, half_lives=(None, 12.0), settings=("paper",))
    assert result["setting"]["shipped_half_life_hours"] == (  # type: ignore[index]
        EVIDENCE_HALF_LIFE.total_seconds() / 3600 if EVIDENCE_HALF_LIFE else None
    )
    summary = result["all"]
    assert isinstance(summary, dict) and summary["cells"] == 4
    ours = summary["ours_standby"]
    assert set(ours) == {"alike", "12 h"}
    assert all(v["deadline_misses"] == 0 for v in ours.values())
    # Uniform Progress on the spot benchmark's jobs, and each half-life as a ratio to it
    trace = load_trace(folder / f"{NAME}.json")
    costs = []
    for fraction in JOB_FRACTIONS:
        s = job_setting(trace, "paper", fraction)
        (start,) = _starts(trace.name, len(data), s, 1)
        r = simulate(np.atleast_2d(trace.available), start, s, uniform_progress_policy,
                     Cadence.production())  # fmt: skip
        costs.append(r.cost / ((s.work + s.changeover) * s.od_tick_cost))
    up = summary["uniform_progress"]
    assert up == round(float(np.mean(costs)), 5)
    for v in ours.values():
        assert v["vs_uniform_progress"] == pytest.approx(
            v["mean_cost_normalized"] / up - 1, abs=1e-4
        )

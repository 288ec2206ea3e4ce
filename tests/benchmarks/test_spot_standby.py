"""Make-before-break in the spot simulator (issue #25): a standby on spot beside on-demand."""

import numpy as np
import pytest

from benchmarks.spot.simulator import (
    ON_DEMAND,
    SPOT,
    STANDBY,
    Cadence,
    Setting,
    View,
    simulate,
)
from benchmarks.spot.standby import OursStandbyPolicy
from tests.benchmarks.spot_scripts import scripted, setting


def test_a_handover_loses_no_step_and_spends_no_changeover_idle() -> None:
    s = setting(work=5, deadline=20, d=2)
    trace = np.ones(20, dtype=bool)
    # t0-1 on-demand's changeover; t2 the standby gets capacity; t2-3 its changeover while
    # on-demand trains; t4 the handover (billed on both); t5-6 spot.
    answers = [ON_DEMAND, ON_DEMAND, STANDBY, STANDBY, STANDBY, SPOT, SPOT]
    r = simulate(trace, 0, s, scripted(answers))
    on_demand_only = simulate(trace, 0, s, lambda v: ON_DEMAND)
    assert r.finish_tick == on_demand_only.finish_tick == 7 and r.met_deadline
    assert (r.od_ticks, r.standby_ticks, r.spot_ticks, r.handovers) == (5, 2, 3, 1)
    assert r.cost == pytest.approx(5 * 3.0 + 2 * 1.0 + 3 * 1.0)
    assert r.actions == [ON_DEMAND] * 4 + [SPOT] * 3  # the handover tick is spot's first


def test_a_standby_preempted_before_its_handover_costs_only_its_own_ticks() -> None:
    s = setting(work=5, deadline=20, d=2)
    trace = np.array([0, 0, 1, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
    seen: list[int | None] = []

    def policy(v: View) -> str:
        seen.append(v.standby_zone)
        return STANDBY if v.current == ON_DEMAND and v.tick in (2, 3) else ON_DEMAND

    r = simulate(trace, 0, s, policy)
    assert seen[4] is None  # gone at t4: the job never left on-demand
    assert r.finish_tick == 7 and r.standbys_lost == 1 and r.handovers == 0
    assert r.cost == pytest.approx(7 * 3.0 + 2 * 1.0)


def test_a_standby_that_finds_no_capacity_costs_nothing_and_is_tried_at_the_cadence() -> None:
    # 195 s ticks, no spot at all; production retries 304 s after a launch finds no capacity
    s = Setting(6, 30, 1, 1.0, 3.0, 195 / 3600)
    trace = np.zeros(30, dtype=bool)

    def policy(v: View) -> str:
        return STANDBY if v.current == ON_DEMAND and v.spot_available else ON_DEMAND

    r = simulate(trace, 0, s, policy, Cadence(304.0))
    assert r.cost == pytest.approx(simulate(trace, 0, s, lambda v: ON_DEMAND).cost)
    assert r.standby_ticks == 0 and r.finish_tick == 7
    # tick 0 is on-demand's start; then at 304 s (tick 1), 608 s (tick 3), 912 s (tick 4),
    # 1216 s (tick 6): never every tick for free
    assert r.standby_attempts == r.failed_attempts == 4


def test_a_standby_is_held_only_beside_on_demand() -> None:
    s = setting(work=3, deadline=10, d=1)
    with pytest.raises(ValueError):
        simulate(np.ones(10, dtype=bool), 0, s, lambda v: STANDBY)


@pytest.mark.parametrize("seed", range(4))
def test_ours_with_a_standby_meets_every_deadline(seed: int) -> None:
    rng = np.random.default_rng(seed)
    trace = np.repeat(rng.random(40) < 0.55, rng.integers(1, 8, 40)).astype(bool)
    trace = np.concatenate([trace, np.zeros(40, dtype=bool)])
    name = "us-east-1a_v100_1"
    for work, deadline, d in ((10, 20, 2), (14, 18, 1), (6, 30, 3)):
        s = setting(work, deadline, d)
        for start in (0, 5, 11):
            for cadence in (None, Cadence.production()):
                r = simulate(trace, start, s, OursStandbyPolicy(name, s), cadence)
                assert r.met_deadline, (start, work, deadline, d)


def test_ours_hands_over_to_spot_that_returns_while_it_runs_on_demand() -> None:
    # spot out long enough to put the job on on-demand, then back for good
    s = Setting(40, 60, 2, 1.0, 3.0, 0.1)
    trace = np.array([0] * 25 + [1] * 60, dtype=bool)
    r = simulate(trace, 0, s, OursStandbyPolicy("us-east-1a_v100_1", s), Cadence(300.0))
    assert r.met_deadline and r.handovers >= 1 and r.standbys_lost == 0
    assert r.actions[-1] == SPOT


def test_the_optimum_with_a_standby_finds_the_handover_and_is_a_lower_bound() -> None:
    from benchmarks.spot.omniscient import omniscient_costs_zones

    # spot back at tick 4 and no slack to wait for it: only a handover reaches it
    s = setting(work=8, deadline=10, d=2)
    trace = np.array([0, 0, 0, 0] + [1] * 10, dtype=bool)[None]
    answers = [ON_DEMAND] * 4 + [STANDBY] * 3 + [SPOT] * 3
    r = simulate(trace, 0, s, scripted(answers))
    assert r.met_deadline and r.handovers == 1
    assert r.cost == pytest.approx(7 * 3.0 + 6 * 1.0)
    assert omniscient_costs_zones(trace, [0], s)[0] == pytest.approx(10 * 3.0)
    assert omniscient_costs_zones(trace, [0], s, standby=True)[0] == pytest.approx(r.cost)


@pytest.mark.parametrize("seed", range(3))
def test_the_optimum_with_a_standby_bounds_ours_with_one(seed: int) -> None:
    from benchmarks.spot.omniscient import omniscient_costs_zones

    rng = np.random.default_rng(seed)
    trace = np.repeat(rng.random(40) < 0.55, rng.integers(1, 8, 40)).astype(bool)
    trace = np.concatenate([trace, np.zeros(40, dtype=bool)])[None]
    for work, deadline, d in ((10, 20, 2), (14, 18, 1), (6, 30, 3)):
        s = setting(work, deadline, d)
        starts = [0, 5, 11]
        plain = omniscient_costs_zones(trace, starts, s)
        best = omniscient_costs_zones(trace, starts, s, standby=True)
        assert (best <= plain + 1e-9).all()
        for i, start in enumerate(starts):
            r = simulate(trace, start, s, OursStandbyPolicy("us-east-1a_v100_1", s))
            assert best[i] <= r.cost + 1e-9

import numpy as np
import pytest

from benchmarks.spot.adapter import OursPolicy
from benchmarks.spot.omniscient import omniscient_costs, omniscient_plan
from benchmarks.spot.policies import greedy_policy, on_demand_policy, uniform_progress_policy
from benchmarks.spot.simulator import (
    IDLE,
    ON_DEMAND,
    SPOT,
    Cadence,
    Setting,
    Trace,
    replay,
    simulate,
)
from tests.benchmarks.spot_scripts import scripted, setting


def test_rules_by_hand() -> None:
    trace = np.array([1, 1, 1, 0, 0, 1, 1, 1, 1, 1], dtype=bool)
    s = setting(work=4, deadline=10, d=1)
    # t0 spot (changeover), t1 spot (+1), t2 spot (+1), t3 preempted -> on-demand (changeover),
    # t4 on-demand (+1), t5 on-demand (+1) -> done at 6 ticks.
    r = simulate(trace, 0, s, scripted([SPOT, SPOT, SPOT, ON_DEMAND, ON_DEMAND, ON_DEMAND]))
    assert r.actions == [SPOT, SPOT, SPOT, ON_DEMAND, ON_DEMAND, ON_DEMAND]
    assert (r.spot_ticks, r.od_ticks, r.finish_tick, r.met_deadline) == (3, 3, 6, True)
    assert r.cost == pytest.approx(3 * 1.0 + 3 * 3.0)
    # idling is free and resets the instance: spot again pays a new changeover
    r = simulate(trace, 0, s, scripted([SPOT, SPOT, IDLE, IDLE, IDLE, SPOT, SPOT, SPOT, SPOT]))
    assert r.cost == pytest.approx(6.0) and r.finish_tick == 9 and r.met_deadline


def test_picking_unavailable_spot_is_an_error() -> None:
    with pytest.raises(ValueError):
        simulate(np.zeros(5, dtype=bool), 0, setting(2, 5, 1), lambda v: SPOT)


def test_setting_rounds_work_and_deadline_down_changeover_up() -> None:
    trace = Trace("t", 300.0, np.ones(10, dtype=bool))
    s = Setting.from_hours(trace, work_hours=1.2, deadline_hours=2.45, changeover_hours=0.2)
    assert (s.work, s.deadline, s.changeover) == (14, 29, 3)


def test_on_demand_cost_and_omniscient_plan_matches_its_cost() -> None:
    trace = np.array([0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1] * 3, dtype=bool)
    s = setting(8, 14, 2)
    assert simulate(trace, 0, s, on_demand_policy).cost == pytest.approx(10 * 3.0)
    cost, actions = omniscient_plan(trace, 0, s)
    assert cost == pytest.approx(omniscient_costs(trace, [0], s)[0])
    assert replay(trace, 0, s, actions).cost == pytest.approx(cost)


@pytest.mark.parametrize("seed", range(6))
def test_omniscient_is_a_lower_bound_and_no_policy_misses(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # blocky availability like the real traces
    trace = np.repeat(rng.random(40) < 0.55, rng.integers(1, 8, 40)).astype(bool)
    trace = np.concatenate([trace, np.zeros(40, dtype=bool)])
    name = "us-east-1a_v100_1"
    for work, deadline, d in ((10, 20, 2), (14, 18, 1), (6, 30, 3)):
        s = setting(work, deadline, d)
        starts = [0, 5, 11]
        best = omniscient_costs(trace, starts, s)
        for i, start in enumerate(starts):
            for policy in (
                on_demand_policy,
                greedy_policy,
                uniform_progress_policy,
                OursPolicy(name, s),
            ):
                if isinstance(policy, OursPolicy):
                    policy = OursPolicy(name, s)  # one adapter per run
                for cadence in (None, Cadence.production()):
                    if isinstance(policy, OursPolicy):
                        policy = OursPolicy(name, s)
                    r = simulate(trace, start, s, policy, cadence)
                    assert r.met_deadline, (policy, start, work, deadline, d)
                    assert best[i] <= r.cost + 1e-9


def test_availability_is_seen_only_through_launch_attempts_at_the_production_cadence() -> None:
    # 195 s ticks, spot out for 6 ticks then back; production retries 304 s after a failure.
    trace = np.array([0] * 6 + [1] * 20, dtype=bool)
    s = Setting(4, 26, 1, 1.0, 3.0, 195 / 3600)
    seen: list[tuple[int, bool]] = []

    def greedy(v):  # noqa: ANN001, ANN202
        seen.append((v.tick, v.spot_available))
        return SPOT if v.spot_available else IDLE

    cadence = Cadence(304.0)
    r = simulate(trace, 0, s, greedy, cadence)
    # Attempts at 0 s (tick 0), 304 s (tick 1), 608 s (tick 3), 912 s (tick 4), 1216 s (tick 6:
    # back). Between them the zone is known out; the trace itself is never shown.
    assert r.attempts == 5 and r.failed_attempts == 4
    assert [t for t, open_ in seen if open_] == [0, 1, 3, 4, 6, 7, 8, 9, 10]
    assert r.actions[:6] == [IDLE] * 6 and r.met_deadline
    assert Cadence.production().retry_seconds == pytest.approx(2.0 + 300.0 + 2.0)


def test_a_move_from_on_demand_to_spot_that_finds_no_capacity_has_stopped_on_demand() -> None:
    trace = np.zeros(20, dtype=bool)
    s = setting(work=5, deadline=20, d=2)
    answers = iter([ON_DEMAND, ON_DEMAND, ON_DEMAND, SPOT, ON_DEMAND] + [ON_DEMAND] * 20)
    r = simulate(trace, 0, s, lambda v: next(answers))
    # ticks 0-1 changeover, tick 2 +1; tick 3 the spot launch fails and on-demand starts again
    assert r.attempts == r.failed_attempts == 1
    assert r.od_ticks == 3 + 2 + 4 and r.finish_tick == 9


def test_multi_zone_runs_spot_where_it_is_and_the_optimum_uses_every_zone() -> None:
    from benchmarks.spot.omniscient import omniscient_costs_zones

    a = np.array([1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1], dtype=bool)
    b = np.array([0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0], dtype=bool)
    zones = np.stack([a, b])
    s = setting(work=6, deadline=12, d=1)
    r = simulate(zones, 0, s, greedy_policy)
    assert "spot@1" in r.actions and r.met_deadline
    both = omniscient_costs_zones(zones, [0], s)[0]
    assert both < min(omniscient_costs(a, [0], s)[0], omniscient_costs(b, [0], s)[0])
    assert omniscient_costs_zones(a[None, :], [0], s)[0] == pytest.approx(
        omniscient_costs(a, [0], s)[0]
    )
    assert both <= r.cost + 1e-9
    ours = simulate(zones, 0, s, OursPolicy(["us-east-1a_v100_1", "us-east-1b_v100_1"], s))
    assert ours.met_deadline and both <= ours.cost + 1e-9

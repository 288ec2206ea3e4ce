"""The Bayes-optimal reference policies of benchmarks/spot/online_bound.py, on traces drawn from
their own model (where their expected costs are checkable) and on traces known by hand."""

import numpy as np
import pytest

from benchmarks.spot.omniscient import omniscient_costs, omniscient_costs_zones
from benchmarks.spot.online_bound import (
    AGES,
    BayesPolicy,
    FilteredBayesPolicy,
    hazards,
    run_ages,
    solve,
)
from benchmarks.spot.simulator import Cadence, Setting, simulate

# spot 1 $/tick, on-demand 3 $/tick; 20 ticks of work in 34, a changeover of 2
SETTING = Setting(20, 34, 2, 1.0, 3.0, 1.0)
LENGTH = SETTING.deadline + SETTING.changeover + 2


def drawn(h: np.ndarray, rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Traces of the semi-Markov model itself, each starting on the first tick of an up run."""
    traces = []
    for _ in range(n):
        up, age, ticks = 1, 0, []
        for _ in range(LENGTH):
            ticks.append(up)
            if rng.random() < h[up, age]:
                up, age = 1 - up, 0
            else:
                age = min(age + 1, AGES - 1)
        traces.append(np.array(ticks, dtype=bool))
    return traces


def bursty() -> np.ndarray:
    """Up runs that grow safer with age, down runs of a few ticks: age matters."""
    h = np.full((2, AGES), 0.3)
    h[1, :] = np.linspace(0.25, 0.02, AGES)
    return h


def test_run_ages_and_hazards_read_the_trace() -> None:
    trace = np.array([1, 1, 1, 0, 0, 1], dtype=bool)
    assert run_ages(trace).tolist() == [0, 1, 2, 0, 1, 0]
    h = hazards([trace])
    assert h[1, 2] == pytest.approx(1.0 - 1e-4)  # an up run of three ticks ended there
    assert h[1, 0] == pytest.approx(1e-4)  # never ended on its first tick: floored, not 0
    assert h[0, 1] == pytest.approx(1.0 - 1e-4)


def test_the_plan_costs_what_it_expects_on_its_own_model() -> None:
    h = bursty()
    plan = solve(SETTING, h, keep_expected=True)
    rng = np.random.default_rng(11)
    costs, misses = [], 0
    for trace in drawn(h, rng, 1500):
        result = simulate(trace, 0, SETTING, BayesPolicy(plan, trace, 0, SETTING))
        costs.append(result.cost)
        misses += not result.met_deadline
    error = np.std(costs) / np.sqrt(len(costs))
    assert misses == 0
    assert abs(np.mean(costs) - plan.start_values[1, 0]) < 4 * error + 1e-9
    # cheaper than on-demand throughout, dearer than spot throughout
    assert (SETTING.work + 2) * 1.0 < np.mean(costs) < (SETTING.work + 2) * 3.0


def test_seeing_less_costs_more_and_knowing_the_future_costs_least() -> None:
    h = bursty()
    plan = solve(SETTING, h, keep_expected=True)
    rng = np.random.default_rng(12)
    retry = Cadence(3 * 3600.0)  # a failed try keeps the zone out for three ticks
    full, partial, omniscient = [], [], []
    for trace in drawn(h, rng, 800):
        seen = simulate(trace, 0, SETTING, BayesPolicy(plan, trace, 0, SETTING), retry)
        guessed = simulate(
            trace, 0, SETTING, FilteredBayesPolicy(plan, h, trace, 0, SETTING), retry
        )
        assert seen.met_deadline and guessed.met_deadline
        best = float(omniscient_costs(trace, [0], SETTING)[0])
        assert best <= seen.cost + 1e-9 and best <= guessed.cost + 1e-9
        full.append(seen.cost)
        partial.append(guessed.cost)
        omniscient.append(best)
    assert np.mean(omniscient) < np.mean(full) < np.mean(partial)


@pytest.mark.parametrize("up", [True, False])
def test_a_trace_that_never_changes_is_all_spot_or_all_on_demand(up: bool) -> None:
    trace = np.full(LENGTH, up)
    h = hazards([np.full(500, up)])
    plan = solve(SETTING, h, keep_expected=True)
    for policy in (
        BayesPolicy(plan, trace, 0, SETTING),
        FilteredBayesPolicy(plan, h, trace, 0, SETTING),
    ):
        result = simulate(trace, 0, SETTING, policy)
        price = 1.0 if up else 3.0
        assert result.met_deadline
        assert result.cost == pytest.approx((SETTING.work + SETTING.changeover) * price)


def test_with_the_handover_the_plan_costs_what_it_expects_and_no_more_than_without() -> None:
    h = bursty()
    plain = solve(SETTING, h)
    plan = solve(SETTING, h, standby=True)
    # the handover is one choice more: never dearer in expectation, and here cheaper
    assert plan.start_values[1, 0] < plain.start_values[1, 0] - 1e-6
    rng = np.random.default_rng(13)
    costs, handovers, best = [], 0, []
    for trace in drawn(h, rng, 1500):
        result = simulate(trace, 0, SETTING, BayesPolicy(plan, trace, 0, SETTING))
        assert result.met_deadline
        assert result.failed_attempts == 0  # seeing every tick, it never tries in vain
        costs.append(result.cost)
        handovers += result.handovers
        best.append(float(omniscient_costs_zones(trace[None], [0], SETTING, standby=True)[0]))
    error = np.std(costs) / np.sqrt(len(costs))
    assert abs(np.mean(costs) - plan.start_values[1, 0]) < 4 * error + 1e-9
    assert handovers > 0
    assert np.mean(best) <= np.mean(costs)

"""How far an online policy can get: a Bayes-optimal policy for a model of the traces.

The spot-policy goals compare ours with the omniscient optimum, which knows every tick of the
trace in advance. No online policy knows the future; the question is how much of the gap
between Uniform Progress and the omniscient optimum knowledge of the past can close. The
reference here is dynamic programming over a semi-Markov model of availability (the chance
that a run of availability, or of unavailability, that has lasted `a` ticks ends at the next
one), fitted on the very traces it is then evaluated on (per trace set, and per trace), run
two ways: seeing availability at every tick (`bayes_full_observation`), and seeing it only as
production does, while it runs on spot, when it is preempted and when a launch attempt succeeds
or fails (`bayes_attempts_only`, which chooses by its belief, QMDP). The first is favoured over
any policy production could run twice over (the model is fitted in-sample; it sees every
tick): an optimistic reference for an online policy under this model, not a proof about every
conceivable online policy (one that exploited structure the model lacks, a time of day, could
do better). The second is a heuristic, not the optimum for what it sees, and bounds nothing.

The ceiling of make-before-break (issue #25) is the first allowed the handover too
(`bayes_full_observation_handover`): beside on-demand it may hold a standby on spot, billed at
the spot price through its changeover and the handover tick, lost when spot goes, handed over
with no step lost, as the simulator has it. Seeing every tick it never tries in vain; production's
standby sees spot only as its launch attempts do. Ours with the standby (`ours_standby`,
benchmarks/spot/standby.py) runs on the same jobs, in the same table.

Rules are the simulator's (benchmarks/spot/simulator.py): the policies run there, on the same
cells as benchmarks/spot_policy, and on its jobs where `--starts` is the same (the draw of start
ticks depends on how many). Three starts per trace take about ten minutes on this project's 2-core
machines, the default twelve about forty; ours + standby runs here too, so its distance to the
ceiling is always on the same jobs.

    python -m benchmarks.spot.online_bound --data ../shared/data --starts 3
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.spot.experiment import (
    JOB_FRACTIONS,
    SETTINGS,
    START_TICKS,
    TRACE_SETS,
    _seen,
    _starts,
    job_setting,
)
from benchmarks.spot.omniscient import omniscient_costs_zones
from benchmarks.spot.policies import uniform_progress_policy
from benchmarks.spot.simulator import (
    IDLE,
    ON_DEMAND,
    SPOT,
    STANDBY,
    Cadence,
    Policy,
    Setting,
    Trace,
    View,
    load_trace,
    simulate,
)
from benchmarks.spot.standby import OursStandbyPolicy

AGES = 24  # age buckets: a run's first AGES - 1 ticks exactly, the rest pooled
FLOOR = 1e-4  # no run is certain to go on (or to end): keeps the deadline out of a bet
INFEASIBLE = 1e9  # the cost of missing the deadline: larger than any bill
ACTIONS = (IDLE, SPOT, ON_DEMAND, STANDBY)  # the plan's choices, by index
POLICIES = (
    "uniform_progress",
    "ours_standby",
    "bayes_attempts_only",
    "bayes_full_observation",
    "bayes_full_observation_per_trace",
    "bayes_full_observation_handover",
    "omniscient",
)


def run_ages(available: np.ndarray) -> np.ndarray:
    """Per tick, the age bucket of the run it is in (0: the run's first tick)."""
    ages = np.zeros(len(available), dtype=np.int64)
    for i in range(1, len(available)):
        ages[i] = ages[i - 1] + 1 if available[i] == available[i - 1] else 0
    return np.minimum(ages, AGES - 1)


def hazards(traces: Sequence[np.ndarray]) -> np.ndarray:
    """h[u, a]: the chance that availability u in age bucket a changes by the next tick."""
    risk = np.zeros((2, AGES))
    change = np.zeros((2, AGES))
    for available in traces:
        ages = run_ages(available)
        state = available[:-1].astype(np.int64)
        np.add.at(risk, (state, ages[:-1]), 1.0)
        np.add.at(change, (state, ages[:-1]), (available[1:] != available[:-1]).astype(float))
    h = np.where(risk > 0, change / np.maximum(risk, 1.0), 0.5)
    return np.clip(h, FLOOR, 1.0 - FLOOR)


@dataclass(frozen=True, slots=True)
class Plan:
    """The policy's decisions: per tick t, for progress lows[t]..lows[t] + len - 1, instance
    state, availability and age bucket, an index into ACTIONS."""

    lows: list[int]
    tables: list[np.ndarray]
    start_values: np.ndarray  # expected cost from tick 0, idle, per availability and age
    # Per tick t, for progress lows[t].. (one row more than tables[t]): the expected cost from
    # tick t + 1 on, per instance state after tick t, availability and age at tick t. Kept
    # only when asked for (FilteredBayesPolicy prices its choices with them).
    expected: list[np.ndarray] | None = None
    price: np.ndarray | None = None
    after: np.ndarray | None = None
    inc: np.ndarray | None = None


def solve(
    setting: Setting, h: np.ndarray, *, keep_expected: bool = False, standby: bool = False
) -> Plan:
    """Backward induction over (tick, progress, instance state, availability, age).

    Instance states: 0 idle, 1 + k spot and d + 2 + k on-demand with k changeover ticks left.
    A tick on an instance with k > 0 makes no progress and leaves k - 1; with k = 0 it makes
    one tick of progress. A spot instance whose zone is unavailable at the next tick is lost
    (idle) before the policy is asked again, as in the simulator.

    With `standby`, make-before-break as the simulator has it (issue #25): on-demand with k
    changeover ticks left and a standby on spot with j left is one state more each
    (`_standby_state`), billed at both prices. Holding a standby with j > 0 goes on (j - 1);
    with j = 0 it hands over within the tick (progress made once) to spot with none left. A
    standby is started only while spot is there (seeing every tick, the plan never tries in
    vain) and lost to on-demand alone when the zone is out at the next tick."""
    s = setting
    W, D, d = s.work, s.deadline, s.changeover
    base = 2 * (d + 1) + 1
    states = base + ((d + 1) ** 2 if standby else 0)
    spot = np.arange(1, d + 2)
    od = np.arange(d + 2, 2 * d + 3)
    price = np.zeros(base)
    price[spot], price[od] = s.spot_tick_cost, s.od_tick_cost
    k = np.concatenate([[0], np.arange(d + 1), np.arange(d + 1)])
    after = np.concatenate([[0], spot[np.maximum(k[spot] - 1, 0)], od[np.maximum(k[od] - 1, 0)]])
    inc = np.where((k == 0) & (np.arange(base) > 0), 1, 0)
    on_spot = np.isin(np.arange(states), spot)
    on_od = np.isin(np.arange(states), od)
    choose_spot = np.where(on_spot, np.arange(states), spot[-1])  # continue, else a fresh start
    choose_od = np.where(on_od, np.arange(states), od[-1])
    held = np.zeros(0, dtype=np.int64)
    if standby:
        ks, js = np.divmod(np.arange((d + 1) ** 2), d + 1)
        held = _standby_state(ks, js, d)
        price = np.concatenate([price, np.full(len(held), s.od_tick_cost + s.spot_tick_cost)])
        handover = js == 0
        after = np.concatenate(
            [after, np.where(handover, spot[0], _standby_state(np.maximum(ks - 1, 0), js - 1, d))]
        )
        inc = np.concatenate([inc, np.where(handover | (ks == 0), 1, 0)])
        choose_od[held] = od[ks]  # answering on-demand stops the standby
        choose_standby = np.full(states, -1)
        choose_standby[od] = _standby_state(np.arange(d + 1), d, d)  # a standby is started
        choose_standby[held] = held  # held: it goes on, or hands over when ready
    older = np.minimum(np.arange(AGES) + 1, AGES - 1)

    value = np.full((W + 1, states, 2, AGES), INFEASIBLE)  # at tick D
    value[W] = 0.0
    lows: list[int] = [0] * D
    tables: list[np.ndarray] = [np.zeros(0, dtype=np.int8)] * D
    kept: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * D
    written = 0  # rows below it hold the last tick's values
    for t in range(D - 1, -1, -1):
        lo, hi = max(0, W - (D - t)), min(t, W - 1)  # progress reachable and still in time
        ahead = value[lo : hi + 2]  # a tick makes at most one tick of progress
        nxt = ahead.copy()
        nxt[:, spot, 0, :] = ahead[:, [0], 0, :]  # preempted at the start of the next tick
        if standby:  # a standby lost: on-demand alone goes on
            nxt[:, held, 0, :] = ahead[:, od[np.divmod(held - base, d + 1)[0]], 0, :]
        stay = nxt[:, :, :, older]
        flip = nxt[:, :, ::-1, :1]
        expected = (1.0 - h)[None, None] * stay + h[None, None] * flip
        rows = np.arange(hi - lo + 1)
        q = price[None, :, None, None] + expected[rows[:, None] + inc[None, :], after[None, :]]
        choices = [np.broadcast_to(q[:, :1], q.shape), q[:, choose_spot], q[:, choose_od]]
        if standby:
            allowed = choose_standby >= 0
            by_standby = np.full_like(q, INFEASIBLE)
            by_standby[:, allowed] = q[:, choose_standby[allowed]]
            by_standby[:, od, 0, :] = INFEASIBLE  # no standby starts while the zone is out
            choices.append(by_standby)
        options = np.stack(choices)
        options[1, :, :, 0, :] = INFEASIBLE  # no spot while the zone is out
        best = options.argmin(axis=0).astype(np.int8)
        value[hi + 1 : written] = INFEASIBLE  # the band moves down: its old top is past reach
        value[lo : hi + 1] = np.take_along_axis(options, best[None].astype(np.int64), 0)[0]
        written = hi + 1
        lows[t], tables[t] = lo, best
        if keep_expected:
            kept[t] = expected.astype(np.float32)
    if not keep_expected:
        return Plan(lows, tables, value[0, 0].copy())
    return Plan(lows, tables, value[0, 0].copy(), kept, price, after, inc)


def _standby_state(k: np.ndarray | int, j: np.ndarray | int, d: int) -> np.ndarray:
    """The state of on-demand with k changeover ticks left and a standby with j left."""
    return np.asarray(2 * (d + 1) + 1 + np.asarray(k) * (d + 1) + np.asarray(j))


class BayesPolicy:
    """The plan, run in the simulator with the trace's availability and run age at each tick."""

    def __init__(self, plan: Plan, available: np.ndarray, start: int, setting: Setting) -> None:
        self.plan, self.start, self.d = plan, start, setting.changeover
        self.available = available
        self.ages = run_ages(available)

    def __call__(self, view: View) -> str:
        t, i = view.tick, self.start + view.tick
        if t >= len(self.plan.tables):
            return ON_DEMAND
        row = view.progress - self.plan.lows[t]
        table = self.plan.tables[t]
        if not 0 <= row < len(table):
            return ON_DEMAND
        if view.current == SPOT:
            state = 1 + view.changeover_left
        elif view.current == ON_DEMAND and view.standby_zone is not None:
            state = int(_standby_state(view.changeover_left, view.standby_left, self.d))
        elif view.current == ON_DEMAND:
            state = self.d + 2 + view.changeover_left
        else:
            state = 0
        up = int(i < len(self.available) and self.available[i])
        age = int(self.ages[i]) if i < len(self.available) else AGES - 1
        return ACTIONS[int(table[row, state, up, age])]


class FilteredBayesPolicy:
    """The same model under production's observation: availability only while the job runs on
    spot, when it is preempted, and when a launch attempt succeeds or fails. What it believes
    of availability and the run's age is the model's forward filter on what it saw; it picks
    the choice of least expected cost under that belief (QMDP: it prices a choice as if it
    would see everything afterwards). A spot try is worth its chance of success at the spot
    price and, when it fails, the best of idling or on-demand afresh, with an instance already
    stopped: the cost production pays for a try from on-demand."""

    def __init__(self, plan: Plan, h: np.ndarray, available: np.ndarray, start: int,
                 setting: Setting) -> None:  # fmt: skip
        assert plan.expected is not None
        self.plan, self.h, self.start, self.d = plan, h, start, setting.changeover
        ages = run_ages(available)
        self.belief = np.zeros((2, AGES))
        self.belief[int(available[start]), ages[start]] = 1.0  # the service's view at submit
        self.tick = 0
        self.answered: tuple[int, str] | None = None  # the last call's tick and answer

    def _advance(self, tick: int) -> None:
        for _ in range(tick - self.tick):
            b, h = self.belief, self.h
            stays = b * (1.0 - h)
            nxt = np.zeros_like(b)
            nxt[:, 1:] = stays[:, :-1]
            nxt[:, -1] += stays[:, -1]  # the oldest bucket holds every older age
            nxt[:, 0] = (b * h)[::-1].sum(axis=1)
            self.belief = nxt
        self.tick = tick

    def _observe(self, up: int) -> None:
        self.belief[1 - up] = 0.0
        total = self.belief.sum()
        if total > 0:
            self.belief /= total
        else:  # the model said impossible: believe the observation, age unknown
            self.belief[up] = 1.0 / AGES

    def __call__(self, view: View) -> str:
        t = view.tick
        if self.answered is not None and self.answered[1] == SPOT and self.answered[0] < t:
            self._observe(1)  # the last answer's spot ran its tick: a try then succeeded
        self._advance(t)
        if view.current == SPOT:
            self._observe(1)
        elif self.answered is not None and self.answered[1] == SPOT:
            self._observe(0)  # preempted, or the try just made failed
        answer = self._choose(view)
        self.answered = (t, answer)
        return answer

    def _choose(self, view: View) -> str:
        plan = self.plan
        price, after, inc = plan.price, plan.after, plan.inc
        assert plan.expected is not None and price is not None
        assert after is not None and inc is not None
        t = view.tick
        if t >= len(plan.tables):
            return ON_DEMAND
        lo = plan.lows[t]
        row = view.progress - lo
        if not 0 <= row < len(plan.tables[t]):
            return ON_DEMAND
        ev = plan.expected[t]

        def q(choice: int) -> np.ndarray:  # (availability, age)
            return price[choice] + ev[row + inc[choice], after[choice]].astype(float)

        d = self.d
        spot_start, od_start = 1 + d, 2 + 2 * d
        if view.current == SPOT:
            state = 1 + view.changeover_left
        elif view.current == ON_DEMAND:
            state = d + 2 + view.changeover_left
        else:
            state = 0
        b = self.belief
        od_choice = state if view.current == ON_DEMAND else od_start
        costs = {
            IDLE: float((b * q(0)).sum()),
            ON_DEMAND: float((b * q(od_choice)).sum()),
        }
        if view.current == SPOT:
            costs[SPOT] = float((b * q(state)).sum())
        elif view.spot_available:
            failed = np.minimum(q(0), q(od_start))[0]  # down: idle or on-demand afresh
            costs[SPOT] = float((b[1] * q(spot_start)[1]).sum() + (b[0] * failed).sum())
        return min(costs, key=lambda k: costs[k])


def _cell(task: tuple[str, str, str, float, int]) -> tuple[str, str, float, dict[str, float]]:
    """One (trace set, setting, job fraction) cell: every policy on every trace's starts."""
    data_dir, set_name, setting_name, fraction, n_starts = task
    traces: list[Trace] = [
        load_trace(p) for p in sorted((Path(data_dir) / "spot-traces" / set_name).glob("*.json"))
    ]
    h = hazards([t.available for t in traces])
    setting = job_setting(traces[0], setting_name, fraction)
    cadence = Cadence.production()
    plan = solve(setting, h, keep_expected=True)
    with_handover = solve(setting, h, standby=True)
    od_cost = (setting.work + setting.changeover) * setting.od_tick_cost
    costs: dict[str, list[float]] = {name: [] for name in POLICIES}
    misses = 0
    for trace in traces:
        available = trace.available
        own = solve(setting, hazards([available]))  # fitted on this trace alone
        starts = _starts(trace.name, len(available), setting, n_starts)
        best = omniscient_costs_zones(available[None], starts, setting) / od_cost
        costs["omniscient"].extend(float(c) for c in best)
        for st in starts:
            policies: dict[str, Policy] = {
                "uniform_progress": uniform_progress_policy,
                "ours_standby": OursStandbyPolicy(
                    [trace.name], setting, seen=_seen(available, st, setting)
                ),
                "bayes_full_observation": BayesPolicy(plan, available, st, setting),
                "bayes_full_observation_per_trace": BayesPolicy(own, available, st, setting),
                "bayes_full_observation_handover": BayesPolicy(
                    with_handover, available, st, setting
                ),
                "bayes_attempts_only": FilteredBayesPolicy(plan, h, available, st, setting),
            }
            for name, policy in policies.items():
                result = simulate(available, st, setting, policy, cadence)
                costs[name].append(result.cost / od_cost)
                if name != "uniform_progress" and not result.met_deadline:
                    misses += 1
    cell: dict[str, float] = {name: round(float(np.mean(v)), 5) for name, v in costs.items()}
    cell["deadline_misses"] = misses
    print(setting_name, set_name, fraction, cell, flush=True)
    return set_name, setting_name, fraction, cell


def run(data: Path, n_starts: int = START_TICKS, workers: int = 2) -> dict[str, object]:
    started = time.perf_counter()
    tasks = [
        (str(data), set_name, setting_name, fraction, n_starts)
        for set_name in TRACE_SETS
        for setting_name in SETTINGS
        for fraction in JOB_FRACTIONS
    ]
    if workers > 1:
        from multiprocessing import Pool

        with Pool(workers) as pool:
            done = pool.map(_cell, tasks, chunksize=1)
    else:
        done = [_cell(task) for task in tasks]
    cells: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for set_name, setting_name, fraction, cell in done:
        cells.setdefault(setting_name, {}).setdefault(set_name, {})[str(fraction)] = cell
    flat = [c for sets in cells.values() for fractions in sets.values() for c in fractions.values()]

    def avg(name: str) -> float:
        return float(np.mean([c[name] for c in flat]))

    up, omni = avg("uniform_progress"), avg("omniscient")
    return {
        "what": __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else "",
        "model": f"run-age hazards in {AGES} buckets, floored at {FLOOR}, fitted per trace set "
        f"(per trace for bayes_full_observation_per_trace)",
        "by_setting": {
            setting: {
                name: round(
                    float(np.mean([c[name] for f in sets.values() for c in f.values()]))
                    / float(
                        np.mean([c["uniform_progress"] for f in sets.values() for c in f.values()])
                    )
                    - 1.0,
                    5,
                )
                for name in POLICIES
            }
            for setting, sets in cells.items()
        },
        "cells": len(flat),
        "starts_per_trace": n_starts,
        "mean_cost_normalized": {name: round(avg(name), 5) for name in POLICIES},
        "vs_uniform_progress": {name: round(avg(name) / up - 1.0, 5) for name in POLICIES},
        "gap_to_omniscient": {name: round(avg(name) / omni - 1.0, 5) for name in POLICIES},
        "worst_cell_vs_uniform_progress": {
            name: round(max(c[name] / c["uniform_progress"] - 1.0 for c in flat), 5)
            for name in POLICIES
        },
        "deadline_misses": int(sum(c["deadline_misses"] for c in flat)),
        "seconds": round(time.perf_counter() - started, 1),
        "by_cell": cells,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--starts", type=int, default=START_TICKS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/spot_online_bound.json")
    )
    args = parser.parse_args(argv)
    result = run(args.data, args.starts, args.workers)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    summary = {k: v for k, v in result.items() if k != "by_cell"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

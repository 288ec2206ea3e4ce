"""A busy service (benchmarks/spot/busy.py): jobs sharing pools learn from each other's attempts
in lockstep, never from an attempt to come; a probe is billed its minute when it finds capacity."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import astuple
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from api.placement.learning import SpotAttempt, pool_history
from api.placement.world import EVIDENCE_HALF_LIFE, OBSERVATION_WINDOW
from benchmarks.spot.adapter import SIM_EPOCH
from benchmarks.spot.busy import VARIANTS, Config, run_busy, summarize, write_results
from benchmarks.spot.service import Job, ServicePolicy, run_service, service_policies
from benchmarks.spot.simulator import (
    ON_DEMAND,
    SPOT_PRICE,
    Cadence,
    Setting,
    Trace,
    View,
    probe_in,
    simulate,
)
from benchmarks.spot.standby import OursStandbyPolicy
from tests.benchmarks.spot_scripts import setting

NAME = "us-east-1a_v100_1"


def flapping(seed: int, length: int = 160) -> np.ndarray:
    rng = np.random.default_rng(seed)
    runs = np.repeat(rng.random(length) < 0.55, rng.integers(1, 6, length)).astype(bool)
    return runs[:length][None]


def quick(work: int, deadline: int, d: int = 2) -> Setting:
    """6-minute ticks, spot 1 $/tick, on-demand 3 $/tick: spot is worth its restarts."""
    return Setting(work, deadline, d, 1.0, 3.0, 0.1)


TICK = Cadence(360.0)  # a refused zone is tried again next tick: no two refusals at one time


def moved(a: SpotAttempt, by: timedelta) -> SpotAttempt:
    def at(t: datetime | None) -> datetime | None:
        return None if t is None else t + by

    return SpotAttempt(a.tried_at + by, at(a.started_at), at(a.ended_at), a.end_reason)


class Recording(ServicePolicy):
    """Records, at each answer, what the service showed the job of the others, and after it
    what the job itself knew (its closed attempts and those holding capacity), by trace tick."""

    def __init__(self, start: int, s: Setting) -> None:
        super().__init__(NAME, s)
        self.start = start
        self.shown: dict[int, list[SpotAttempt]] = {}  # first answer of each tick
        self.knew: dict[int, list[SpotAttempt]] = {}  # after the last answer of each tick

    def __call__(self, v: View) -> str:
        now = SIM_EPOCH + timedelta(hours=v.tick * self.setting.gap_hours)
        self.shown.setdefault(self.start + v.tick, list(self.others[0]))
        for a in self.others[0]:  # made before this tick; ended by now at the latest
            assert a.tried_at < now and (a.started_at is None or a.started_at < now)
            assert a.ended_at is None or a.ended_at <= now
        answer = super().__call__(v)
        open_ = [SpotAttempt(t, t, None, None) for _, t in self.holding()]
        self.knew[self.start + v.tick] = [*self.own()[0], *open_]
        return answer


def test_a_probe_that_finds_capacity_is_billed_its_minute_and_one_that_finds_none_nothing() -> None:
    s = setting(work=4, deadline=10, d=1)  # 1 h ticks, spot 1 $/tick, on-demand 3 $/tick
    trace = np.array([0, 1, 1, 0, 1, 1, 1, 1, 1, 1], dtype=bool)
    found: list[tuple[int, bool, bool]] = []

    def policy(v: View) -> str:
        if v.probe_found is not None:
            found.append((v.tick, v.probe_found, v.zones_open[0]))
            return ON_DEMAND
        return probe_in(0) if v.tick in (0, 1, 3) else ON_DEMAND

    r = simulate(trace, 0, s, policy, Cadence(3600.0))
    plain = simulate(trace, 0, s, lambda v: ON_DEMAND, Cadence(3600.0))
    # out at t0 and t3 (free, the zone known out as after a refused launch), capacity at t1
    assert found == [(0, False, False), (1, True, True), (3, False, False)]
    assert (r.probes, r.probe_hits) == (3, 1)
    assert r.cost - plain.cost == pytest.approx(1.0 / 60) == r.probe_cost
    assert r.actions == plain.actions and r.finish_tick == plain.finish_tick


def test_a_probe_on_a_real_trace_tick_is_billed_a_minute_of_spot() -> None:
    s = Setting.from_hours(
        Trace("t", 195.0, np.ones(2000, dtype=bool)),
        work_hours=2.0, deadline_hours=4.0, changeover_hours=0.2,
    )  # fmt: skip

    def policy(v: View) -> str:
        return probe_in(0) if v.tick == 0 and v.probe_found is None else ON_DEMAND

    r = simulate(np.ones(200, dtype=bool), 0, s, policy)
    plain = simulate(np.ones(200, dtype=bool), 0, s, lambda v: ON_DEMAND)
    assert r.probe_hits == 1 and r.probe_cost == pytest.approx(SPOT_PRICE / 60)  # $ a minute
    assert r.cost - plain.cost == pytest.approx(r.probe_cost)


def test_ours_probes_only_beside_on_demand_at_the_cadence_and_holds_the_standby_it_found() -> None:
    s = Setting(40, 60, 2, 1.0, 3.0, 0.05)  # 180 s ticks: a refused zone stays out a tick
    cadence = Cadence(304.0)
    hits = 0
    for back in range(17, 27):
        trace = np.array([0] * back + [1] * 60, dtype=bool)
        policy = ServicePolicy(NAME, s, probe=cadence)
        answers: list[tuple[View, str]] = []

        def watch(
            v: View, policy: ServicePolicy = policy, answers: list[tuple[View, str]] = answers
        ) -> str:
            answers.append((v, policy(v)))
            return answers[-1][1]

        r = simulate(trace, 0, s, watch, cadence)
        assert r.met_deadline and r.probes == len(policy.probes)
        ticks = [t for t, _ in policy.probes]
        assert all((b - a) * 180 >= 304 for a, b in zip(ticks, ticks[1:], strict=False))
        for i, (v, answer) in enumerate(answers):
            if answer.startswith("probe"):
                assert v.current == ON_DEMAND and v.standby_zone is None
                after, next_answer = answers[i + 1]
                if after.probe_found:  # seen with capacity: the standby is held at once
                    assert next_answer == "standby@0"
        hits += r.probe_hits
    assert hits > 0  # the case is not vacuous


@pytest.mark.parametrize("history", (False, True))
def test_alone_without_probes_is_ours_with_a_standby(history: bool) -> None:
    available = flapping(3)
    jobs = [Job(0, quick(30, 60)), Job(4, quick(20, 60, 1)), Job(9, quick(40, 90))]
    cadence = Cadence.production()

    def ours(job: Job) -> OursStandbyPolicy:
        seen = service_policies([NAME], available, [job], probe=None, history=history)[0]
        return OursStandbyPolicy(NAME, job.setting, seen=[seen.attempts[0]])

    alone = service_policies([NAME], available, jobs, probe=None, history=history)
    results = run_service(available, jobs, alone, shared=False, cadence=cadence)
    for job, r in zip(jobs, results, strict=True):
        own = simulate(available, job.start, job.setting, ours(job), cadence)
        assert (r.cost, r.actions) == (own.cost, own.actions)
    # one job alone in a shared service has nothing to learn from others
    solo = service_policies([NAME], available, jobs[:1], probe=None, history=history)
    (r,) = run_service(available, jobs[:1], solo, shared=True, cadence=cadence)
    assert r.actions == results[0].actions


@pytest.mark.parametrize("seed", range(3))
def test_lockstep_shows_a_job_what_the_others_knew_before_its_tick_and_nothing_after(
    seed: int,
) -> None:
    available = flapping(seed)
    s = quick(40, 100)
    starts = (0, 3)
    jobs = [Job(st, s) for st in starts]
    policies = [Recording(st, s) for st in starts]
    results = run_service(available, jobs, policies, shared=True, cadence=TICK)
    first, second = policies
    gap = timedelta(hours=s.gap_hours)
    ahead = (starts[1] - starts[0]) * gap  # the second job's clock is behind the first's
    checked = 0
    for tick, shown in second.shown.items():
        if tick - 1 not in first.knew or tick > starts[0] + results[0].finish_tick - 1:
            continue  # the first job had not started, or has finished (its attempts closed)
        expected = [moved(a, -ahead) for a in first.knew[tick - 1]]
        assert sorted(shown, key=repr) == sorted(expected, key=repr), tick
        # what the first job learned in this very tick is not shown until the next
        new = [moved(a, -ahead) for a in first.knew[tick] if a not in first.knew[tick - 1]]
        assert not any(a in shown for a in new)
        checked += bool(new)
    assert checked > 0  # the first job did learn something in a tick the second decided in
    # the order the jobs are asked in within a tick changes nothing
    again = [Recording(st, s) for st in reversed(starts)]
    swapped = run_service(available, jobs[::-1], again, shared=True, cadence=TICK)
    assert [r.cost for r in swapped[::-1]] == [r.cost for r in results]


@pytest.mark.parametrize("only", ("runs", "refusals"))
def test_a_job_can_be_shown_only_the_others_runs_or_only_their_refusals(only: str) -> None:
    available = flapping(1)
    s = quick(40, 100)
    jobs = [Job(st, s) for st in (0, 3)]
    policies = [Recording(j.start, s) for j in jobs]
    run_service(available, jobs, policies, shared=True, cadence=TICK, only=only)
    shown = [a for p in policies for tick in p.shown.values() for a in tick]
    assert shown and all((a.started_at is not None) == (only == "runs") for a in shown)


def test_a_later_job_learns_the_pool_from_every_earlier_jobs_attempts() -> None:
    available = flapping(5, 200)
    s = quick(30, 60)
    late = 100  # after the first three are done
    jobs = [Job(0, s), Job(0, s), Job(0, s), Job(late, s)]

    class FirstSight(ServicePolicy):
        def __call__(self, v: View) -> str:
            if v.tick == 0:
                now = SIM_EPOCH
                self.first_sight = (self._rates(now), list(self.others[0]), now)
            return super().__call__(v)

    for shared in (True, False):
        policies = [FirstSight(NAME, s) for _ in jobs]
        results = run_service(available, jobs, policies, shared=shared, cadence=TICK)
        assert all(r.met_deadline for r in results)
        rates, shown, now = policies[3].first_sight
        pool = (policies[3].offer.zone, policies[3].offer.instance_type)
        everything: list[SpotAttempt] = []
        for p, r in zip(policies[:3], results[:3], strict=True):
            end = SIM_EPOCH + r.finish_tick * timedelta(hours=s.gap_hours)
            held = [SpotAttempt(t, t, end, "stopped") for _, t in p.holding()]
            back = late * timedelta(hours=s.gap_hours)
            everything += [moved(a, -back) for a in [*p.own()[0], *held]]
        seen = pool_history(
            everything, since=now - OBSERVATION_WINDOW, now=now, half_life=EVIDENCE_HALF_LIFE
        )
        if shared:
            assert seen.preemptions > 0 and seen.spot_hours > 0  # three jobs' worth of it

            # every run once; the identical jobs' refusals at one instant once
            def ran(xs: list[SpotAttempt]) -> list[SpotAttempt]:
                return sorted((a for a in xs if a.started_at is not None), key=repr)

            assert ran(shown) == ran(everything) and len(ran(shown)) >= 3
            assert set(shown) == set(everything) and len(shown) < len(everything)
            # the same fold, up to the order spot hours are added in
            assert astuple(rates[pool]) == pytest.approx(astuple(seen.posterior(policies[3].prior)))
        else:
            assert shown == [] and rates[pool] == policies[3].prior


def tiny_data(root: Path) -> Path:
    """Two zones of one region in a set the benchmark reads, 600 s ticks."""
    folder = root / "spot-traces" / "availability" / "1-node" / "aws-10-26-2022"
    folder.mkdir(parents=True)
    for zone, seed in (("us-west-2a", 1), ("us-west-2b", 2)):
        data = [int(x) for x in flapping(seed, 120)[0]]
        raw = {"metadata": {"gap_seconds": 600}, "data": data}
        (folder / f"{zone}_v100_1.json").write_text(json.dumps(raw))
    return root


def test_the_result_file_says_what_each_source_is_worth(tmp_path: Path) -> None:
    config = Config(
        jobs=3, deadline_hours=4.0, spread_hours=2.0,
        trace_sets=("availability/1-node/aws-10-26-2022",),
    )  # fmt: skip
    result = run_busy(tiny_data(tmp_path), config)
    out = tmp_path / "spot_busy.json"
    write_results(result, out)
    back = json.loads(out.read_text())
    assert "not measured" in back["capacity_scores"]
    assert back["setting"]["traces"] == 2 and back["setting"]["zone_groups"] == 1
    single = back["single_zone"]
    assert (single["units"], single["jobs"]) == (2, 6)
    assert set(single["variants"]) == set(VARIANTS)
    assert set(single["worth"]) == {
        "other_jobs_attempts", "probe_single_job", "probe_busy_service",
        "other_jobs_attempts_and_probe",
    }  # fmt: skip
    for worth in single["worth"].values():
        with_, without = worth["compares"].split(" / ")
        means = {v: single["variants"][v]["mean_cost_normalized"] for v in (with_, without)}
        assert worth["mean_cost_normalized"] == means and worth["jobs"] == 6
        assert worth["cost_ratio"] == pytest.approx(means[with_] / means[without], rel=1e-3)
    assert set(back["multi_zone"]["variants"]) == {"alone", "shared"}
    assert set(back["multi_zone"]["worth"]) == {"other_jobs_attempts"}
    cold = back["cold_start_single_zone"]
    assert cold["jobs"] == 6
    assert set(cold["worth"]) == {"other_jobs_attempts", "other_jobs_runs", "other_jobs_refusals"}
    assert set(back["week_before"]) == {"alone", "shared"}
    week = back["week_before"]["alone"]
    assert week["mean_cost_normalized"] == {
        "with_week": single["variants"]["alone"]["mean_cost_normalized"],
        "cold": cold["variants"]["alone"]["mean_cost_normalized"],
    }


def test_a_summary_of_nothing_is_empty() -> None:
    empty: Sequence[dict[str, object]] = []
    assert summarize(list(empty)) == {
        "units": 0, "jobs": 0, "variants": {}, "worth": {}, "per_set": {}
    }  # fmt: skip

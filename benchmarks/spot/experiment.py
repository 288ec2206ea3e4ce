"""The benchmark: every trace of the chosen sets, job sizes, start ticks and cost settings, each
policy, and the summary table (costs normalised to on-demand, deadline misses, gap to omniscient).

Single-zone: each trace alone. Multi-zone: the zones of one region whose traces cover the same
window (same set, instance and length), where a job may run spot in any of them and a move is a
new instance (one changeover; no egress within a region). Settings: the paper's (spot at 32% of
on-demand, 0.2 h changeover), spot at half of on-demand, and a 0.5 h changeover.
"""

from __future__ import annotations

import argparse
import zlib
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import numpy as np

from api.placement.learning import SpotAttempt
from benchmarks.spot.adapter import SIM_EPOCH, OursPolicy
from benchmarks.spot.observed import resident_attempts
from benchmarks.spot.omniscient import omniscient_costs_zones, omniscient_plan
from benchmarks.spot.policies import greedy_policy, on_demand_policy, uniform_progress_policy
from benchmarks.spot.simulator import (
    CHANGEOVER_HOURS,
    OD_PRICE,
    SPOT_PRICE,
    Cadence,
    Policy,
    Setting,
    Trace,
    load_trace,
    replay,
    simulate,
)
from benchmarks.spot.standby import OursStandbyPolicy

DEADLINE_HOURS = 48.0
JOB_FRACTIONS = (0.6, 0.7, 0.8, 0.9)
START_TICKS = 12
SEED = 20240416
TRACE_SETS = (
    "availability/1-node/aws-02-15-2023",
    "availability/1-node/aws-10-26-2022",
    "availability/16-node/aws-08-27-2023",
)
# name -> (spot price, on-demand price, changeover hours)
SETTINGS: dict[str, tuple[float, float, float]] = {
    "paper": (SPOT_PRICE, OD_PRICE, CHANGEOVER_HOURS),
    "spot_half_price": (OD_PRICE / 2, OD_PRICE, CHANGEOVER_HOURS),
    "changeover_0.5h": (SPOT_PRICE, OD_PRICE, 0.5),
}
POLICIES = ("on_demand", "greedy", "uniform_progress", "omniscient", "ours", "ours_standby")
OPTIMUM_STANDBY = "omniscient_standby"  # the optimum with make-before-break too (a reference)
STANDBY_NOTE = (
    "ours_standby: decide()'s rule, and beside on-demand a standby on spot (make-before-break, "
    "issue #25): each try is a launch attempt at production's cadence (nothing billed when "
    "refused), a standby with capacity is billed at the spot price from that tick through its "
    "changeover and the handover tick (on-demand billed beside it), the handover loses no "
    "step; held where decide() would move to spot or where it pays for itself "
    "(benchmarks/spot/standby.py). omniscient_standby: the optimum allowed the same handover"
)
ONLINE = ("on_demand", "greedy", "uniform_progress", "ours", "ours_standby")


def _policy(
    name: str, names: Sequence[str], setting: Setting, available: np.ndarray, start: int
) -> Policy:
    """The policy for a job submitted at tick `start`; ours with what the service saw before."""
    if name == "ours":
        return OursPolicy(names, setting, seen=_seen(available, start, setting))
    if name == "ours_standby":
        return OursStandbyPolicy(names, setting, seen=_seen(available, start, setting))
    return {
        "on_demand": on_demand_policy,
        "greedy": greedy_policy,
        "uniform_progress": uniform_progress_policy,
    }[name]


def _seen(available: np.ndarray, start: int, setting: Setting) -> list[list[SpotAttempt]]:
    """Per zone, what a running service saw of it in the observation window before `start`
    (observed.py, at production's cadence); the job is submitted at the adapter's SIM_EPOCH."""
    epoch = SIM_EPOCH - timedelta(hours=start * setting.gap_hours)
    retry_seconds = Cadence.production().retry_seconds
    return [
        resident_attempts(
            zone, start, gap_hours=setting.gap_hours, retry_seconds=retry_seconds, epoch=epoch
        )
        for zone in np.atleast_2d(available)
    ]  # fmt: skip


def _starts(key: str, length: int, setting_max: Setting, count: int) -> list[int]:
    rng = np.random.default_rng(SEED + zlib.crc32(key.encode()))
    high = length - setting_max.deadline - setting_max.changeover - 1
    return sorted(int(x) for x in rng.choice(high, size=min(count, high), replace=False))


def zone_groups(data: Path) -> list[tuple[str, list[Path]]]:
    """Per trace set, the zones of one region with the same instance and trace length."""
    groups: dict[tuple[str, str, str, int], list[Path]] = {}
    for set_name in TRACE_SETS:
        for path in sorted((data / "spot-traces" / set_name).glob("*.json")):
            zone, _, instance = path.stem.partition("_")
            length = len(load_trace(path).available)
            groups.setdefault((set_name, zone[:-1], instance, length), []).append(path)
    return [(k[0], v) for k, v in sorted(groups.items()) if len(v) > 1]


def job_setting(trace: Trace, setting_name: str, fraction: float) -> Setting:
    """A job of `fraction` of the deadline's hours on `trace`, under a named cost setting."""
    spot_price, od_price, changeover = SETTINGS[setting_name]
    return Setting.from_hours(
        trace,
        work_hours=DEADLINE_HOURS * fraction,
        deadline_hours=DEADLINE_HOURS,
        changeover_hours=changeover,
        spot_price=spot_price,
        od_price=od_price,
    )


def _run_task(task: tuple[str, tuple[str, ...], str, float, int]) -> dict[str, object]:
    set_name, paths, setting_name, fraction, n_starts = task
    traces = [load_trace(Path(p)) for p in paths]
    trace: Trace = traces[0]
    available = np.stack([t.available for t in traces])
    names = [t.name for t in traces]
    setting = job_setting(trace, setting_name, fraction)
    cadence = Cadence.production()
    starts = _starts("+".join(names), available.shape[1], setting, n_starts)
    od_cost = (setting.work + setting.changeover) * setting.od_tick_cost
    out: dict[str, dict[str, list[float]]] = {}
    omni = omniscient_costs_zones(available, starts, setting)
    out["omniscient"] = {"cost": list(omni / od_cost), "miss": [0.0] * len(starts)}
    # the same optimum allowed the standby's make-before-break: the ceiling of that design
    ceiling = omniscient_costs_zones(available, starts, setting, standby=True)
    out["omniscient_standby"] = {"cost": list(ceiling / od_cost), "miss": [0.0] * len(starts)}
    for name in ONLINE:
        acc: dict[str, list[float]] = {}
        for st in starts:
            policy = _policy(name, names, setting, available, st)
            r = simulate(available, st, setting, policy, cadence)
            acc.setdefault("cost", []).append(r.cost / od_cost)
            acc.setdefault("miss", []).append(0.0 if r.met_deadline else 1.0)
            acc.setdefault("spot_hours", []).append(r.spot_ticks * setting.gap_hours)
            acc.setdefault("failed_attempts", []).append(float(r.failed_attempts))
            if name == "ours_standby":
                acc.setdefault("standby_hours", []).append(r.standby_ticks * setting.gap_hours)
                acc.setdefault("standby_cost", []).append(
                    r.standby_ticks * setting.spot_tick_cost / od_cost
                )
                acc.setdefault("handovers", []).append(float(r.handovers))
                acc.setdefault("standbys_lost", []).append(float(r.standbys_lost))
        out[name] = acc
    return {
        "set": set_name if len(paths) == 1 else f"{set_name} {names[0].split('_')[0][:-1]}",
        "unit": "+".join(names),
        "setting": setting_name,
        "fraction": fraction,
        "results": out,
    }


def tasks(
    data: Path, n_starts: int, *, multi_zone: bool, settings: Sequence[str]
) -> list[tuple[str, tuple[str, ...], str, float, int]]:
    units: list[tuple[str, list[Path]]]
    if multi_zone:
        units = zone_groups(data)
    else:
        units = [
            (set_name, [path])
            for set_name in TRACE_SETS
            for path in sorted((data / "spot-traces" / set_name).glob("*.json"))
        ]
    return [
        (set_name, tuple(str(p) for p in paths), setting, fraction, n_starts)
        for set_name, paths in units
        for setting in settings
        for fraction in JOB_FRACTIONS
    ]


def run_benchmark(
    data: Path,
    n_starts: int = START_TICKS,
    workers: int = 2,
    settings: Sequence[str] = tuple(SETTINGS),
    multi_zone_settings: Sequence[str] = ("paper",),
) -> dict[str, object]:
    single = tasks(data, n_starts, multi_zone=False, settings=settings)
    multi = tasks(data, n_starts, multi_zone=True, settings=multi_zone_settings)
    if workers > 1:
        from multiprocessing import Pool

        with Pool(workers) as pool:
            rows = pool.map(_run_task, single + multi, chunksize=1)
    else:
        rows = [_run_task(t) for t in single + multi]
    return {
        "setting": {
            "settings": {
                k: {"spot_price": v[0], "on_demand_price": v[1], "changeover_hours": v[2]}
                for k, v in SETTINGS.items()
            },
            "deadline_hours": DEADLINE_HOURS,
            "job_fractions": list(JOB_FRACTIONS),
            "start_ticks_per_trace": n_starts,
            "seed": SEED,
            "retry_seconds": Cadence.production().retry_seconds,
            "observation": "spot availability only as a launch attempt reveals it; a failed "
            "attempt's zone is retried after the reconcile pass, no_capacity_backoff_s and the "
            "next scheduling pass (api.settings defaults)",
            "learning": "ours starts from the pooled prior moved by what a running service saw "
            "of each zone in the observation window before the job (one resident spot job's "
            "attempts, benchmarks/spot/observed.py) and keeps learning from the job's own, by "
            "the scheduler's rule (api.placement.learning)",
            "standby": STANDBY_NOTE,
            "availability": "value > 0 = spot available (16-node set: at least one instance)",
            "averages": "unweighted over (setting, trace set, job fraction) cells",
        },
        "single_zone": summarize(rows[: len(single)]),
        "multi_zone": summarize(rows[len(single) :]),
    }


def summarize(rows: list[dict[str, object]]) -> dict[str, object]:
    pooled: dict[tuple[str, str, float, str], dict[str, list[float]]] = {}
    for row in rows:
        results, fraction = row["results"], row["fraction"]
        assert isinstance(results, dict) and isinstance(fraction, float)
        for policy, res in results.items():
            key = (str(row["setting"]), str(row["set"]), fraction, policy)
            acc = pooled.setdefault(key, {})
            for k, values in res.items():
                acc.setdefault(k, []).extend(values)
    table: dict[str, dict[str, dict[str, dict[str, dict[str, float]]]]] = {}
    for (setting, set_name, fraction, policy), acc in sorted(pooled.items()):
        omni = float(np.mean(pooled[(setting, set_name, fraction, "omniscient")]["cost"]))
        mean = float(np.mean(acc["cost"]))
        entry = {
            "mean_cost_normalized": round(mean, 5),
            "deadline_misses": int(sum(acc["miss"])),
            "runs": len(acc["cost"]),
            "gap_to_omniscient": round(mean / omni - 1.0, 5),
        }
        if "spot_hours" in acc:
            entry["mean_spot_hours"] = round(float(np.mean(acc["spot_hours"])), 3)
            entry["mean_failed_attempts"] = round(float(np.mean(acc["failed_attempts"])), 2)
        for k in ("standby_hours", "standby_cost", "handovers", "standbys_lost"):
            if k in acc:
                entry[f"mean_{k}"] = round(float(np.mean(acc[k])), 4)
        cell = table.setdefault(setting, {}).setdefault(set_name, {})
        cell.setdefault(str(fraction), {})[policy] = entry
    summary = {name: _summary(cells) for name, cells in table.items()}
    everything = {f"{s} | {t}": v for s, sets in table.items() for t, v in sets.items()}
    summary["all"] = _summary(everything)
    overall = summary["all"]
    assert isinstance(overall, dict)
    overall["interval"] = {
        "what": INTERVAL_NOTE,
        "ours_vs_uniform_progress": resampled_interval(rows, "ours"),
        "ours_standby_vs_uniform_progress": resampled_interval(rows, "ours_standby"),
    }
    return {"summary": summary, "cells": table}


INTERVAL_NOTE = (
    "95% interval of the policy's mean cost over Uniform Progress's, minus 1 (cells weigh alike), "
    "with each trace set's traces drawn with replacement (2000 draws; a trace keeps its jobs in "
    "every setting and job fraction, since they share its pool's weather); null where a set has "
    "one trace or one zone group"
)


def resampled_interval(
    rows: Sequence[dict[str, object]],
    policy: str,
    against: str = "uniform_progress",
    *,
    draws: int = 2000,
    seed: int = SEED,
) -> list[float] | None:
    """How much the summary's `policy` against `against` owes to which traces were recorded:
    the 2.5th and 97.5th percentiles of the ratio over draws of each set's traces with
    replacement. A trace is the sample, not a job: its starts, settings and job fractions all
    ride the same pool."""
    cells: dict[tuple[str, str, float], dict[str, tuple[float, float, int]]] = {}
    units: dict[str, list[str]] = {}
    for row in rows:
        results = row["results"]
        assert isinstance(results, dict)
        mine, theirs = results[policy]["cost"], results[against]["cost"]
        set_name, unit = str(row["set"]), str(row["unit"])
        key = (set_name, str(row["setting"]), float(row["fraction"]))  # type: ignore[arg-type]
        cells.setdefault(key, {})[unit] = (float(sum(mine)), float(sum(theirs)), len(mine))
        if unit not in units.setdefault(set_name, []):
            units[set_name].append(unit)
    if not cells or any(len(u) < 2 for u in units.values()):
        return None
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(draws):
        drawn = {name: rng.choice(len(u), size=len(u)) for name, u in units.items()}
        ours = theirs = 0.0
        for (set_name, _, _), by_unit in cells.items():
            picked = [by_unit[units[set_name][i]] for i in drawn[set_name]]
            n = sum(p[2] for p in picked)
            if n == 0:
                continue
            ours += sum(p[0] for p in picked) / n
            theirs += sum(p[1] for p in picked) / n
        ratios.append(ours / theirs - 1.0)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return [round(float(low), 5), round(float(high), 5)]


def _summary(sets: dict[str, dict[str, dict[str, dict[str, float]]]]) -> dict[str, object]:
    cells = [fr for fractions in sets.values() for fr in fractions.values()]

    def avg(policy: str) -> float:
        return float(np.mean([c[policy]["mean_cost_normalized"] for c in cells]))

    ours, up, omni = avg("ours"), avg("uniform_progress"), avg("omniscient")

    def worst_vs_up(policy: str) -> float:
        return max(
            c[policy]["mean_cost_normalized"] / c["uniform_progress"]["mean_cost_normalized"] - 1
            for c in cells
        )

    worst = worst_vs_up("ours")
    standby, worst_standby = avg("ours_standby"), worst_vs_up("ours_standby")

    def mean_of(key: str) -> float:
        return round(float(np.mean([c["ours_standby"][key] for c in cells])), 4)

    return {
        "cells": len(cells),
        "mean_cost_normalized": {p: round(avg(p), 5) for p in (*POLICIES, OPTIMUM_STANDBY)},
        "ours_vs_uniform_progress": round(ours / up - 1.0, 5),
        "ours_vs_greedy": round(ours / avg("greedy") - 1.0, 5),
        "ours_gap_to_omniscient": round(ours / omni - 1.0, 5),
        "ours_worst_cell_vs_uniform_progress": round(worst, 5),
        "ours_deadline_misses": int(sum(c["ours"]["deadline_misses"] for c in cells)),
        "ours_never_above_uniform_progress": worst <= 0.0,
        "ours_standby": {
            "vs_uniform_progress": round(standby / up - 1.0, 5),
            "vs_greedy": round(standby / avg("greedy") - 1.0, 5),
            "vs_ours": round(standby / ours - 1.0, 5),
            "gap_to_omniscient": round(standby / omni - 1.0, 5),
            "gap_to_omniscient_standby": round(standby / avg(OPTIMUM_STANDBY) - 1.0, 5),
            "worst_cell_vs_uniform_progress": round(worst_standby, 5),
            "deadline_misses": int(sum(c["ours_standby"]["deadline_misses"] for c in cells)),
            "never_above_uniform_progress": worst_standby <= 0.0,
            "mean_standby_cost_normalized": mean_of("mean_standby_cost"),
            "mean_standby_hours": mean_of("mean_standby_hours"),
            "mean_handovers": mean_of("mean_handovers"),
            "mean_standbys_lost": mean_of("mean_standbys_lost"),
        },
    }


def single_run(args: argparse.Namespace) -> dict[str, object]:
    trace = load_trace(Path(args.trace))
    setting = Setting.from_hours(
        trace,
        work_hours=args.work_hours,
        deadline_hours=args.deadline_hours,
        changeover_hours=args.changeover_hours,
    )
    if args.policy == "omniscient":
        cost, actions = omniscient_plan(trace.available, args.start_tick, setting)
        result = replay(trace.available, args.start_tick, setting, actions)
        assert abs(result.cost - cost) < 1e-6
    else:
        result = simulate(
            trace.available,
            args.start_tick,
            setting,
            _policy(args.policy, [trace.name], setting, trace.available, args.start_tick),
            Cadence.production(),
        )
    g = setting.gap_hours
    return {
        "policy": args.policy,
        "cost": round(result.cost, 6),
        "spot_hours": round(result.spot_ticks * g, 6),
        "on_demand_hours": round(result.od_ticks * g, 6),
        "finish_hours": round(result.finish_tick * g, 6),
        "met_deadline": result.met_deadline,
        "launch_attempts": result.attempts,
        "failed_launch_attempts": result.failed_attempts,
        "actions": result.actions,
    }

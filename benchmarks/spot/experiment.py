"""The benchmark: every trace of the chosen sets, job sizes and start ticks, each policy, and the
summary table (costs normalised to on-demand, deadline misses, gap to omniscient)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks.spot.adapter import OursPolicy
from benchmarks.spot.omniscient import omniscient_costs, omniscient_plan
from benchmarks.spot.policies import greedy_policy, on_demand_policy, uniform_progress_policy
from benchmarks.spot.simulator import (
    CHANGEOVER_HOURS,
    OD_PRICE,
    SPOT_PRICE,
    Policy,
    Setting,
    Trace,
    load_trace,
    replay,
    simulate,
)

DEADLINE_HOURS = 48.0
JOB_FRACTIONS = (0.6, 0.7, 0.8, 0.9)
START_TICKS = 100
SEED = 20240416
TRACE_SETS = (
    "availability/1-node/aws-02-15-2023",
    "availability/1-node/aws-10-26-2022",
    "availability/16-node/aws-08-27-2023",
)
POLICIES = ("on_demand", "greedy", "uniform_progress", "omniscient", "ours")


def _policy(name: str, trace: Trace, setting: Setting) -> Policy:
    if name == "ours":
        return OursPolicy(trace.name, setting)
    return {
        "on_demand": on_demand_policy,
        "greedy": greedy_policy,
        "uniform_progress": uniform_progress_policy,
    }[name]


def _starts(trace: Trace, setting_max: Setting, count: int) -> list[int]:
    import zlib

    rng = np.random.default_rng(SEED + zlib.crc32(trace.name.encode()))
    high = len(trace.available) - setting_max.deadline - setting_max.changeover - 1
    return sorted(int(x) for x in rng.choice(high, size=min(count, high), replace=False))


def _run_task(task: tuple[str, str, float, int]) -> dict[str, object]:
    path, set_name, fraction, n_starts = task
    trace = load_trace(Path(path))
    setting = Setting.from_hours(
        trace,
        work_hours=DEADLINE_HOURS * fraction,
        deadline_hours=DEADLINE_HOURS,
        changeover_hours=CHANGEOVER_HOURS,
    )
    starts = _starts(trace, setting, n_starts)
    od_cost = (setting.work + setting.changeover) * setting.od_tick_cost
    out: dict[str, dict[str, list[float]]] = {}
    omni = omniscient_costs(trace.available, starts, setting)
    out["omniscient"] = {"cost": list(omni / od_cost), "miss": [0.0] * len(starts)}
    for name in ("on_demand", "greedy", "uniform_progress", "ours"):
        costs, misses, spot = [], [], []
        for st in starts:
            r = simulate(trace.available, st, setting, _policy(name, trace, setting))
            costs.append(r.cost / od_cost)
            misses.append(0.0 if r.met_deadline else 1.0)
            spot.append(r.spot_ticks * setting.gap_hours)
        out[name] = {"cost": costs, "miss": misses, "spot_hours": spot}
    return {"set": set_name, "trace": trace.name, "fraction": fraction, "results": out}


def run_benchmark(data: Path, n_starts: int = START_TICKS, workers: int = 2) -> dict[str, object]:
    tasks = []
    for set_name in TRACE_SETS:
        for path in sorted((data / "spot-traces" / set_name).glob("*.json")):
            for fraction in JOB_FRACTIONS:
                tasks.append((str(path), set_name, fraction, n_starts))
    if workers > 1:
        from multiprocessing import Pool

        with Pool(workers) as pool:
            rows = pool.map(_run_task, tasks)
    else:
        rows = [_run_task(t) for t in tasks]
    return summarize(rows, n_starts)


def summarize(rows: list[dict[str, object]], n_starts: int) -> dict[str, object]:
    table: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    pooled: dict[tuple[str, float, str], dict[str, list[float]]] = {}
    for row in rows:
        results = row["results"]
        fraction = row["fraction"]
        assert isinstance(results, dict) and isinstance(fraction, float)
        for policy, res in results.items():
            acc = pooled.setdefault((str(row["set"]), fraction, policy), {})
            for k, values in res.items():
                acc.setdefault(k, []).extend(values)
    for (set_name, fraction, policy), acc in sorted(pooled.items()):
        omni = float(np.mean(pooled[(set_name, fraction, "omniscient")]["cost"]))
        mean = float(np.mean(acc["cost"]))
        entry = {
            "mean_cost_normalized": round(mean, 5),
            "deadline_misses": int(sum(acc["miss"])),
            "runs": len(acc["cost"]),
            "gap_to_omniscient": round(mean / omni - 1.0, 5),
        }
        if "spot_hours" in acc:
            entry["mean_spot_hours"] = round(float(np.mean(acc["spot_hours"])), 3)
        table.setdefault(set_name, {}).setdefault(str(fraction), {})[policy] = entry
    cells = [(s, f) for s, fr in table.items() for f in fr]

    def avg(policy: str) -> float:
        return float(np.mean([table[s][f][policy]["mean_cost_normalized"] for s, f in cells]))

    ours, up, omni = avg("ours"), avg("uniform_progress"), avg("omniscient")
    summary = {
        "mean_cost_normalized": {p: round(avg(p), 5) for p in POLICIES},
        "ours_vs_uniform_progress": round(ours / up - 1.0, 5),
        "ours_gap_to_omniscient": round(ours / omni - 1.0, 5),
        "ours_deadline_misses": sum(table[s][f]["ours"]["deadline_misses"] for s, f in cells),
        "ours_never_above_uniform_progress": all(
            table[s][f]["ours"]["mean_cost_normalized"]
            <= table[s][f]["uniform_progress"]["mean_cost_normalized"]
            for s, f in cells
        ),
    }
    return {
        "setting": {
            "on_demand_price": OD_PRICE,
            "spot_price": SPOT_PRICE,
            "changeover_hours": CHANGEOVER_HOURS,
            "deadline_hours": DEADLINE_HOURS,
            "job_fractions": list(JOB_FRACTIONS),
            "start_ticks_per_trace": n_starts,
            "seed": SEED,
            "availability": "value > 0 = spot available (16-node set: at least one instance)",
            "averages": "unweighted over (trace set, job fraction) cells",
        },
        "summary": summary,
        "trace_sets": table,
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
            trace.available, args.start_tick, setting, _policy(args.policy, trace, setting)
        )
    g = setting.gap_hours
    return {
        "policy": args.policy,
        "cost": round(result.cost, 6),
        "spot_hours": round(result.spot_ticks * g, 6),
        "on_demand_hours": round(result.od_ticks * g, 6),
        "finish_hours": round(result.finish_tick * g, 6),
        "met_deadline": result.met_deadline,
        "actions": result.actions,
    }

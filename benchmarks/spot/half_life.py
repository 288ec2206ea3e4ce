"""How much the age of a sight should count: ours + standby over the spot benchmark's
single-zone jobs, with the pools' evidence weighed by 2^(-age / half-life) for several
half-lives (api.placement.world.EVIDENCE_HALF_LIFE is the shipped one), against Uniform
Progress on the same jobs in the same run.

    python -m benchmarks.spot.half_life --data ../shared/data   # results/spot_half_life.json

The jobs, settings and cell averages are the spot benchmark's (experiment.py), with three
starts per trace (six weighings at its twelve would take over an hour here), Uniform Progress on
the same jobs; the job starts from what a running service saw of its pool in the week before
(observed.py) and learns from its own attempts, only the weighing changes. Per trace set as well
as over all: a half-life that helps in one set and hurts in the others is fitted to that set.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import timedelta
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from api.placement.world import EVIDENCE_HALF_LIFE
from benchmarks.spot.experiment import SETTINGS, _seen, _starts, job_setting, tasks
from benchmarks.spot.policies import uniform_progress_policy
from benchmarks.spot.simulator import Cadence, load_trace, simulate
from benchmarks.spot.standby import OursStandbyPolicy

HALF_LIVES = (None, 3.0, 6.0, 12.0, 24.0, 48.0)  # hours; None: every sight alike
STARTS = 3

Task = tuple[str, tuple[str, ...], str, float, int, tuple[float | None, ...]]


def _run(task: Task) -> tuple[tuple[str, str, float], dict[str, list[float]]]:
    """One cell's jobs: Uniform Progress, and ours + standby at each half-life."""
    set_name, paths, setting_name, fraction, n_starts, half_lives = task
    trace = load_trace(Path(paths[0]))
    available = np.atleast_2d(trace.available)
    setting = job_setting(trace, setting_name, fraction)
    cadence = Cadence.production()
    od_cost = (setting.work + setting.changeover) * setting.od_tick_cost
    out: dict[str, list[float]] = {}
    for start in _starts(trace.name, available.shape[1], setting, n_starts):
        up = simulate(available, start, setting, uniform_progress_policy, cadence)
        out.setdefault("uniform_progress", []).append(up.cost / od_cost)
        for hours in half_lives:
            policy = OursStandbyPolicy(
                [trace.name],
                setting,
                seen=_seen(available, start, setting),
                half_life=None if hours is None else timedelta(hours=hours),
            )
            r = simulate(available, start, setting, policy, cadence)
            out.setdefault(_name(hours), []).append(r.cost / od_cost)
            out.setdefault(f"{_name(hours)} misses", []).append(0.0 if r.met_deadline else 1.0)
    return (set_name, setting_name, fraction), out


def _name(hours: float | None) -> str:
    return "alike" if hours is None else f"{hours:g} h"


def _summary(cells: dict[tuple[str, str, float], dict[str, list[float]]]) -> dict[str, object]:
    names = [k for k in next(iter(cells.values())) if not k.endswith("misses")]

    def avg(name: str) -> float:
        return float(np.mean([np.mean(c[name]) for c in cells.values()]))

    up = avg("uniform_progress")
    return {
        "cells": len(cells),
        "uniform_progress": round(up, 5),
        "ours_standby": {
            n: {
                "mean_cost_normalized": round(avg(n), 5),
                "vs_uniform_progress": round(avg(n) / up - 1.0, 5),
                "deadline_misses": int(sum(sum(c[f"{n} misses"]) for c in cells.values())),
            }
            for n in names
            if n != "uniform_progress"
        },
    }


def run(
    data: Path,
    *,
    starts: int = STARTS,
    workers: int = 2,
    half_lives: Sequence[float | None] = HALF_LIVES,
    settings: Sequence[str] = tuple(SETTINGS),
) -> dict[str, object]:
    jobs: list[Task] = [
        (*t, tuple(half_lives)) for t in tasks(data, starts, multi_zone=False, settings=settings)
    ]
    if workers > 1:
        with Pool(workers) as pool:
            rows = pool.map(_run, jobs, chunksize=1)
    else:
        rows = [_run(t) for t in jobs]
    cells: dict[tuple[str, str, float], dict[str, list[float]]] = {}
    for key, out in rows:
        acc = cells.setdefault(key, {})
        for name, values in out.items():
            acc.setdefault(name, []).extend(values)
    by_set = sorted({key[0] for key in cells})
    shipped = EVIDENCE_HALF_LIFE.total_seconds() / 3600 if EVIDENCE_HALF_LIFE else None
    return {
        "setting": {
            "policy": "ours + standby (benchmarks/spot/standby.py), the spot benchmark's "
            "single-zone jobs, cells and averages (experiment.py)",
            "starts_per_trace": starts,
            "half_lives_hours": list(half_lives),
            "shipped_half_life_hours": shipped,
            "weighing": "each hour run, preemption, hour of outage and recovery a pool showed "
            "weighs 2^(-age / half-life) in its posterior (api.placement.learning.pool_history); "
            "alike: every sight in the observation window weighs 1",
        },
        "all": _summary(cells),
        "per_trace_set": {
            s: _summary({k: v for k, v in cells.items() if k[0] == s}) for s in by_set
        },
    }


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=root.parent.parent / "shared" / "data")
    parser.add_argument("--starts", type=int, default=STARTS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=root / "results" / "spot_half_life.json")
    args = parser.parse_args(argv)
    result = run(args.data, starts=args.starts, workers=args.workers)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["all"], indent=1))


if __name__ == "__main__":
    main()

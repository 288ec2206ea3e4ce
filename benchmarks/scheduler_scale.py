"""How decide() scales: 100, 1,000 and 10,000 pending jobs, each with distinct requirements,
full catalog.

    python -m benchmarks.scheduler_scale

Writes benchmarks/results/scheduler_scale.json: seconds per call (best of a few), per-job cost
and the growth exponent of a log-log fit of time against jobs.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from api.placement import JobState, Reservation, Snapshot, decide
from api.pricing.catalog import default_catalog
from api.pricing.gpu_speed import DEFAULT_SPEEDS, normalized
from api.pricing.preemption import default_priors
from api.pricing.requirements import requirement
from gpujobs.spec import CapacityType, JobSpec

SIZES = (100, 1_000, 10_000)
NOW = datetime(2026, 1, 1, tzinfo=UTC)
MODELS = (["V100"], ["A100", "A100-80GB"], ["H100"], ["T4", "L4"], ["A10G"], None, ["L40S"])
REGIONS = (None, ["us-east-1", "us-west-2"], ["us-central1"], ["eu-west-1", "europe-west4"])
CAPACITY = (
    ["reserved", "spot", "on_demand"],
    ["spot", "on_demand"],
    ["on_demand"],
    ["spot"],
)


def make_jobs(n: int, seed: int = 7) -> list[JobState]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        hours = rng.uniform(1, 48)
        spec = JobSpec.model_validate(
            {
                "name": f"job-{i}",
                "trainer": {"steps": 1000},
                "resources": {
                    "gpu_models": rng.choice(MODELS),
                    "gpus_per_node": rng.choice((1, 1, 4, 8)),
                    "nodes": rng.choice((1, 1, 1, 2, 4)),
                    "regions": rng.choice(REGIONS),
                    # every job asks for a slightly different minimum: no two share a
                    # requirement, so nothing is served from the per-requirement cache
                    "min_gpu_memory_gb": round(8.0 + i * 1e-4, 4),
                },
                "capacity": {
                    "types": rng.choice(CAPACITY),
                    "max_price_per_hour": rng.choice((None, None, 50.0, 200.0)),
                },
                "estimated_hours": hours,
                "deadline_hours": hours * rng.uniform(1.1, 3.0),
                "priority": rng.randint(0, 100),
            }
        )
        jobs.append(
            JobState(
                id=f"j{i}",
                team=f"team-{i % 20}",
                spec=spec,
                submitted_at=NOW - timedelta(hours=rng.uniform(0, 1)),
                deadline_at=spec.deadline_at(NOW),
                remaining_hours=hours,
            )
        )
    return jobs


def snapshot_for(jobs: list[JobState]) -> Snapshot:
    catalog = default_catalog()
    rng = random.Random(3)
    unavailable = frozenset(
        (o.zone, o.instance_type, CapacityType.SPOT)
        for o in catalog.offers
        if o.spot_price is not None and rng.random() < 0.3
    )
    reservations = [
        Reservation("r-p3", "p3.2xlarge", "use1-az1", 50, 10, 2.0),
        Reservation("r-p4d", "p4d.24xlarge", "usw2-az2", 8, 0, 20.0),
    ]
    budgets: dict[str, float | None] = {f"team-{i}": 50_000.0 for i in range(10)}
    return Snapshot(
        now=NOW,
        jobs=jobs,
        offers=catalog.offers,
        unavailable=unavailable,
        reservations=reservations,
        budgets=budgets,
        priors=default_priors(),
        gpu_speeds=normalized(DEFAULT_SPEEDS),  # as on Kubernetes: offers ranked per work
    )


def shared(jobs: list[JobState]) -> list[JobState]:
    """The baseline: the same jobs without the distinct memory minimum (few requirements)."""
    out = []
    for j in jobs:
        resources = j.spec.resources.model_copy(update={"min_gpu_memory_gb": None})
        out.append(replace(j, spec=j.spec.model_copy(update={"resources": resources})))
    return out


def measure(n: int, repeats: int, *, distinct: bool = True) -> dict[str, float]:
    jobs = make_jobs(n)
    snap = snapshot_for(jobs if distinct else shared(jobs))
    best = cpu = math.inf
    decisions = []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        decisions = decide(snap)
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    kinds: dict[str, int] = {}
    for d in decisions:
        kinds[type(d).__name__] = kinds.get(type(d).__name__, 0) + 1
    return {
        "jobs": n,
        "seconds": round(best, 5),
        # CPU time of this process: on a shared machine, wall time also counts other processes
        "cpu_seconds": round(cpu, 5),
        "us_per_job": round(best / n * 1e6, 2),
        **kinds,
    }


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=root / "results" / "scheduler_scale.json")
    args = parser.parse_args(argv)
    decide(snapshot_for(make_jobs(10)))  # warm the catalog and priors caches
    rows = [measure(n, args.repeats) for n in SIZES]
    baseline = measure(SIZES[-1], args.repeats, distinct=False)
    xs = [math.log(r["jobs"]) for r in rows]
    ys = [math.log(r["seconds"]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    result = {
        "catalog_offers": len(default_catalog().offers),
        "runs": rows,
        "baseline_shared_requirements": baseline,
        "distinct_vs_shared_cpu_ratio": round(rows[-1]["cpu_seconds"] / baseline["cpu_seconds"], 3),
        "growth_exponent": round(slope, 3),
        "distinct_requirements": len({requirement(j.spec.resources) for j in make_jobs(SIZES[-1])}),
        "goal": "10,000 jobs with distinct requirements under 1 s; exponent no worse than n log n "
        "(~1.1 over this range)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""A busy service: many jobs sharing spot pools, and what each source of observation is worth
(issue #25: observation is priced, never free).

    python -m benchmarks.spot.busy --data ../shared/data   # writes results/spot_busy.json

The service learns a pool only from what something paid to see. Sources, each charged its cost:
- The job's own launch attempts (the spot benchmark, experiment.py): a launch that finds no
  capacity is free; one that finds capacity is the spot (or the standby) the job asked for.
- Other jobs' attempts in the same pools. The scheduler reads every job's spot attempts
  service-wide (api.placement.world.pool_histories, one query over the observation window), so a
  job's pool is learned from every launch, preemption and refusal of the jobs beside it. Those
  attempts are made anyway, for the jobs that made them: the information is free, and nothing
  here bills it.
- A probe: ask a zone for capacity and cancel at once (the simulator's `probe`). One that finds
  capacity is billed one minute at the spot price (SkyNomad's billing; a fraction of a tick, the
  traces' ticks being 195-600 s), one that finds none is free; either is recorded as the
  reconciler would record the attempt (a zero-length attempt `cancelled`, or `no_capacity`).
- Cloud capacity signals (AWS spot placement scores, interruption-frequency bands, GCP's
  obtainability): not measured. ../shared/data holds availability traces and price catalogs and
  no capacity score, and none is invented here; the result file says so.

The busy service: K jobs (`JOBS`) share the pools of one trace (single-zone) or of one region's
zones whose traces cover the same window (multi-zone, experiment.zone_groups), submitted at
ticks drawn over `SPREAD_HOURS` (so most overlap), each with its own work (the paper's job
fractions, one per job in turn) under the paper's 48 h deadline and cost setting. Every job is
run by ours + standby (OursStandbyPolicy), starting, as in the spot benchmark, from what a
running service saw of each pool in the week before it (observed.py). The trace says whether a
pool has capacity, not how much: jobs do not compete for it.

Variants:
- alone: each job learns only from its own attempts (and the week before it): the spot benchmark.
- shared: the K jobs run tick by tick in lockstep; before a job decides at trace tick t it is
  given every other job's attempts in its pools as the service knew them after tick t - 1 (the
  closed ones, and those still holding capacity, open): none made at t or later, each once.
  Only the attempts are shared. The no-capacity marks (the snapshot's `unavailable`, 304 s
  from a refusal at production's cadence) are service-wide in production too but stay per job
  here: on the 300 s and 600 s traces a mark made before tick t never keeps a zone out through
  t, but on the 195 s traces one made late in tick t - 1 (a retry within it) does, so shared
  marks would hold some jobs' launches back a tick. That effect is not measured.
- alone_probe, shared_probe: the same, with probes (service.ServicePolicy._probe_zone): while
  the job runs on on-demand and holds no standby, at most once per `Cadence.production()`, and only
  where what the probe could show changes the answer: decide()'s answer with the zone seen
  with capacity now (open, and its outage seen to end) would be a standby there, where without
  it the answer holds none. Where the answer already holds a standby, its launch is the look,
  free when refused: no probe is needed.
Single-zone, the same jobs again with nothing seen before them (cold start: the pooled prior, as
a new service or a pool it never ran in), alone and shared, and shared in parts: only the other
jobs' attempts that held capacity (`shared_runs`: their spot time and preemptions) or only their
launches that found none (`shared_refusals`). Comparing the two starts gives what the week
before is worth (`week_before`). Multi-zone: alone and shared (the CPU budget).

Figures: mean cost as a share of on-demand (work and one changeover on on-demand), deadline
misses, and what each source is worth as the cost ratio of the same policy with it to without it.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.spot.experiment import (
    JOB_FRACTIONS,
    SEED,
    SETTINGS,
    TRACE_SETS,
    zone_groups,
)
from benchmarks.spot.service import Job, run_service, service_policies
from benchmarks.spot.simulator import (
    PROBE_BILLED_SECONDS,
    Cadence,
    Setting,
    load_trace,
)

if TYPE_CHECKING:
    from api.pricing.preemption import PreemptionPrior

    Rates = dict[tuple[str, str], PreemptionPrior]

JOBS = 8
BURSTS = 1  # bursts of JOBS jobs per trace (or zone group)
DEADLINE_HOURS = 48.0
SPREAD_HOURS = 48.0  # submissions fall within this long after a burst's first tick
SETTING = "paper"
VARIANTS = ("alone", "shared", "alone_probe", "shared_probe")
MULTI_ZONE_VARIANTS = ("alone", "shared")  # probes measured single-zone: the CPU budget
COLD_START_VARIANTS = ("alone", "shared", "shared_runs", "shared_refusals")
SHARED_ONLY = {"shared_runs": "runs", "shared_refusals": "refusals"}
POLICY_NOTE = (
    "ours + standby (benchmarks/spot/standby.py), each job starting from what a running "
    "service saw of its pools in the week before it (observed.py), as in the spot benchmark"
)
COLD_NOTE = (
    "cold_start_single_zone: the same jobs with nothing seen before them (the pooled prior): "
    "a new service, or pools it never ran in; shared_runs shares only the other jobs' attempts "
    "that held capacity (their spot time and preemptions), shared_refusals only their "
    "launches that found none"
)
WEEK_NOTE = (
    "week_before: the same single-zone jobs starting from the week a running service saw "
    "(observed.py) over starting from the pooled prior alone"
)
CAPACITY_SCORES = (
    "not measured: ../shared/data holds spot availability traces and price catalogs, no cloud "
    "capacity score (AWS spot placement scores, interruption-frequency bands, GCP "
    "obtainability); none is invented here"
)
SHARED_NOTE = (
    "other jobs' attempts are made anyway, for the jobs that made them: the information is "
    "free and nothing bills it; before a job decides at trace tick t it is given the other "
    "jobs' attempts in its pools as the service knew them after tick t - 1, each once; the "
    "no-capacity marks stay per job (not measured: see the module's docstring)"
)
PROBE_NOTE = (
    f"a probe asks a zone for capacity and cancels at once: one that finds capacity is billed "
    f"{PROBE_BILLED_SECONDS:.0f} s at the spot price (SkyNomad), one that finds none is free; "
    "it is recorded as the attempt the reconciler would record; at most once per production "
    "cadence, while on on-demand with no standby, and only where decide()'s answer with the "
    "zone seen with capacity would hold a standby there where it holds none without"
)


@dataclass(frozen=True, slots=True)
class Config:
    jobs: int = JOBS
    bursts: int = BURSTS
    deadline_hours: float = DEADLINE_HOURS
    spread_hours: float = SPREAD_HOURS
    setting: str = SETTING
    trace_sets: tuple[str, ...] = TRACE_SETS
    variants: tuple[str, ...] = VARIANTS  # single-zone, each job starting from the week before
    multi_zone_variants: tuple[str, ...] = MULTI_ZONE_VARIANTS
    cold_start_variants: tuple[str, ...] = COLD_START_VARIANTS  # single-zone, nothing before


def bursts(key: str, length: int, setting: Setting, config: Config) -> Iterator[list[int]]:
    """Submission ticks, `config.jobs` per burst, seeded by the trace's name."""
    rng = np.random.default_rng(SEED + zlib.crc32(key.encode()))
    spread = max(1, int(config.spread_hours / setting.gap_hours))
    high = length - spread - setting.deadline - setting.changeover - 1
    for _ in range(config.bursts):
        base = int(rng.integers(0, high))
        yield sorted(base + int(x) for x in rng.integers(0, spread, size=config.jobs))


def run_unit(
    paths: Sequence[Path], config: Config, variants: Sequence[str], *, history: bool = True
) -> dict[str, object]:
    """Every burst of one trace (or zone group), each variant; figures per job."""
    traces = [load_trace(p) for p in paths]
    names = [t.name for t in traces]
    available = np.stack([t.available for t in traces])
    spot_price, od_price, changeover = SETTINGS[config.setting]

    def setting(fraction: float) -> Setting:
        return Setting.from_hours(
            traces[0],
            work_hours=config.deadline_hours * fraction,
            deadline_hours=config.deadline_hours,
            changeover_hours=changeover,
            spot_price=spot_price,
            od_price=od_price,
        )

    cadence = Cadence.production()
    key = "+".join(names)
    out: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    jobs_run: list[dict[str, float]] = []
    for b, starts in enumerate(bursts(key, available.shape[1], setting(1.0), config)):
        rng = np.random.default_rng(SEED + zlib.crc32(f"{key}#{b}".encode()))
        fractions = [JOB_FRACTIONS[i % len(JOB_FRACTIONS)] for i in rng.permutation(len(starts))]
        jobs = [Job(st, setting(fr)) for st, fr in zip(starts, fractions, strict=True)]
        jobs_run += [
            {"start_tick": j.start, "fraction": f} for j, f in zip(jobs, fractions, strict=True)
        ]
        for variant in variants:
            probe = cadence if variant.endswith("_probe") else None
            policies = service_policies(names, available, jobs, probe=probe, history=history)
            results = run_service(
                available,
                jobs,
                policies,
                shared=variant.startswith("shared"),
                cadence=cadence,
                only=SHARED_ONLY.get(variant),
            )
            acc = out[variant]
            for job, r in zip(jobs, results, strict=True):
                od = (job.setting.work + job.setting.changeover) * job.setting.od_tick_cost
                acc.setdefault("cost", []).append(r.cost / od)
                acc.setdefault("miss", []).append(0.0 if r.met_deadline else 1.0)
                acc.setdefault("probes", []).append(float(r.probes))
                acc.setdefault("probe_hits", []).append(float(r.probe_hits))
                acc.setdefault("probe_cost", []).append(r.probe_cost / od)
                acc.setdefault("handovers", []).append(float(r.handovers))
                acc.setdefault("failed_attempts", []).append(float(r.failed_attempts))
    set_name = next((s for s in config.trace_sets if s in str(paths[0])), str(paths[0].parent))
    return {
        "set": set_name if len(paths) == 1 else f"{set_name} {names[0].split('_')[0][:-1]}",
        "zones": names,
        "gap_seconds": traces[0].gap_seconds,
        "jobs": jobs_run,
        "results": out,
    }


def units(data: Path, config: Config) -> tuple[list[list[Path]], list[list[Path]]]:
    single = [
        [path]
        for set_name in config.trace_sets
        for path in sorted((data / "spot-traces" / set_name).glob("*.json"))
    ]
    multi = [paths for set_name, paths in zone_groups(data) if set_name in config.trace_sets]
    return single, (multi if config.multi_zone_variants else [])


def _worth(acc: dict[str, dict[str, list[float]]], with_: str, without: str) -> dict[str, Any]:
    """The variant `with_` against `without`, the same jobs."""
    cost_with, cost_without = np.asarray(acc[with_]["cost"]), np.asarray(acc[without]["cost"])
    return {
        "compares": f"{with_} / {without}",
        "cost_ratio": round(float(cost_with.mean() / cost_without.mean()), 5),
        "mean_cost_normalized": {
            with_: round(float(cost_with.mean()), 5),
            without: round(float(cost_without.mean()), 5),
        },
        "deadline_misses": {
            with_: int(sum(acc[with_]["miss"])),
            without: int(sum(acc[without]["miss"])),
        },
        "jobs_cheaper": int((cost_with < cost_without - 1e-9).sum()),
        "jobs_costlier": int((cost_with > cost_without + 1e-9).sum()),
        "jobs": len(cost_with),
    }


WORTH = {  # what a source is worth: the variant with it / the same without it
    "other_jobs_attempts": ("shared", "alone"),
    "probe_single_job": ("alone_probe", "alone"),
    "probe_busy_service": ("shared_probe", "shared"),
    "other_jobs_attempts_and_probe": ("shared_probe", "alone"),
    "other_jobs_runs": ("shared_runs", "alone"),
    "other_jobs_refusals": ("shared_refusals", "alone"),
}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant over every job of the rows, what each source is worth, and per trace set."""
    pooled: dict[str, dict[str, list[float]]] = {}
    per_set: dict[str, dict[str, dict[str, list[float]]]] = {}
    for row in rows:
        for variant, acc in row["results"].items():
            cell = per_set.setdefault(row["set"], {}).setdefault(variant, {})
            for k, values in acc.items():
                pooled.setdefault(variant, {}).setdefault(k, []).extend(values)
                cell.setdefault(k, []).extend(values)

    def entry(acc: dict[str, list[float]]) -> dict[str, float]:
        return {
            "mean_cost_normalized": round(float(np.mean(acc["cost"])), 5),
            "deadline_misses": int(sum(acc["miss"])),
            "jobs": len(acc["cost"]),
            "mean_probes": round(float(np.mean(acc["probes"])), 3),
            "mean_probe_hits": round(float(np.mean(acc["probe_hits"])), 3),
            "mean_probe_cost_normalized": round(float(np.mean(acc["probe_cost"])), 6),
            "mean_handovers": round(float(np.mean(acc["handovers"])), 3),
            "mean_failed_attempts": round(float(np.mean(acc["failed_attempts"])), 2),
        }

    def worth(acc: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
        return {
            name: _worth(acc, with_, without)
            for name, (with_, without) in WORTH.items()
            if with_ in acc and without in acc
        }

    return {
        "units": len(rows),
        "jobs": sum(len(row["jobs"]) for row in rows),
        "variants": {v: entry(acc) for v, acc in pooled.items()},
        "worth": worth(pooled),
        "per_set": {
            name: {
                "worth": {k: w["cost_ratio"] for k, w in worth(acc).items()},
                "mean_cost_normalized": {
                    v: entry(a)["mean_cost_normalized"] for v, a in acc.items()
                },
                "deadline_misses": {v: entry(a)["deadline_misses"] for v, a in acc.items()},
            }
            for name, acc in sorted(per_set.items())
        },
    }


def _pooled(rows: list[dict[str, Any]], variant: str) -> dict[str, list[float]]:
    acc: dict[str, list[float]] = {}
    for row in rows:
        for k, values in row["results"][variant].items():
            acc.setdefault(k, []).extend(values)
    return acc


def week_before(warm: list[dict[str, Any]], cold: list[dict[str, Any]]) -> dict[str, Any]:
    """What the week a running service saw before each job is worth: the same jobs (the same
    units and bursts) with it over without it, per variant run both ways."""
    out: dict[str, Any] = {}
    for variant in VARIANTS:
        if warm and cold and variant in warm[0]["results"] and variant in cold[0]["results"]:
            acc = {"with_week": _pooled(warm, variant), "cold": _pooled(cold, variant)}
            out[variant] = _worth(acc, "with_week", "cold")
    return out


def run_busy(data: Path, config: Config = Config()) -> dict[str, Any]:
    single, multi = units(data, config)
    warm = [run_unit(paths, config, config.variants) for paths in single]
    multi_rows = [run_unit(paths, config, config.multi_zone_variants) for paths in multi]
    cold = [
        run_unit(paths, config, config.cold_start_variants, history=False)
        for paths in (single if config.cold_start_variants else [])
    ]
    spot_price, od_price, changeover = SETTINGS[config.setting]
    return {
        "setting": {
            "cost_setting": {
                "name": config.setting,
                "spot_price": spot_price,
                "on_demand_price": od_price,
                "changeover_hours": changeover,
            },
            "deadline_hours": config.deadline_hours,
            "job_fractions": list(JOB_FRACTIONS),
            "jobs_per_burst": config.jobs,
            "bursts_per_trace": config.bursts,
            "submissions_within_hours": config.spread_hours,
            "seed": SEED,
            "retry_seconds": Cadence.production().retry_seconds,
            "probe_billed_seconds": PROBE_BILLED_SECONDS,
            "trace_sets": list(config.trace_sets),
            "traces": len(single),
            "zone_groups": len(multi),
            "variants": {
                "single_zone": list(config.variants),
                "multi_zone": list(config.multi_zone_variants),
                "cold_start_single_zone": list(config.cold_start_variants),
            },
            "policy": POLICY_NOTE,
            "cold_start": COLD_NOTE,
            "week_before": WEEK_NOTE,
            "capacity": "the trace says whether a pool has capacity, not how much: jobs do "
            "not compete for it",
            "shared": SHARED_NOTE,
            "probe": PROBE_NOTE,
            "capacity_scores": CAPACITY_SCORES,
            "figures": "mean cost as a share of on-demand (work and one changeover), over "
            "jobs; cost_ratio: the mean with the source over the mean without it, same jobs",
        },
        "capacity_scores": CAPACITY_SCORES,
        "single_zone": summarize(warm),
        "multi_zone": summarize(multi_rows),
        "cold_start_single_zone": summarize(cold),
        "week_before": week_before(warm, cold),
    }


def write_results(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description="Spot benchmark: a busy service's sources.")
    parser.add_argument("--data", type=Path, default=root / ".." / "shared" / "data")
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--bursts", type=int, default=BURSTS)
    parser.add_argument("--no-multi-zone", action="store_true")
    parser.add_argument("--no-cold-start", action="store_true")
    parser.add_argument(
        "--out", type=Path, default=root / "benchmarks" / "results" / "spot_busy.json"
    )
    args = parser.parse_args(argv)
    config = Config(
        jobs=args.jobs,
        bursts=args.bursts,
        multi_zone_variants=() if args.no_multi_zone else MULTI_ZONE_VARIANTS,
        cold_start_variants=() if args.no_cold_start else COLD_START_VARIANTS,
    )
    began = time.process_time()
    result = run_busy(args.data, config)
    write_results(result, args.out)
    sections = ("single_zone", "multi_zone", "cold_start_single_zone")
    worth = {k: {n: w["cost_ratio"] for n, w in result[k]["worth"].items()} for k in sections}
    print(json.dumps(worth, indent=1))
    print(f"{time.process_time() - began:.0f} s of CPU")


if __name__ == "__main__":
    main()

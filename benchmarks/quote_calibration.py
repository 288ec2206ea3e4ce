"""Quote calibration: the quote at submit against what the policy then costs on real traces.

    python -m benchmarks.quote_calibration --data ../shared/data

For jobs of several sizes (work = 0.6-0.9 of a 48 h deadline, spot or on-demand) submitted at
seeded random start times on each 1-node availability trace, the quote admission records
(api.placement.estimate.policy_quote on the snapshot the scheduler would see at submit) is
compared with the cost of the same job replayed tick by tick through the shipped decide() on the
trace at production's retry cadence (benchmarks/spot: the adapter the spot policy benchmark
uses, learning the rate as it goes), with make-before-break where the service has it by default,
in the quote and the replay (benchmarks/spot/standby.py; `--no-standby` without). The snapshot
is a running service's: the pool's shipped prior (for these zones fitted on these same traces
over all their periods, 2022-2023, so not the period replayed) updated with what the service saw
of the pool in the observation window before submit, as a service keeping one spot job there
would have seen it (observed.py, folded by the scheduler's own learning.pool_history),
decide()'s restart and reaction time, and whether spot is there now. The replay starts from the
same learned state.
Reported: median |quote - billed| / billed for the quote's likely cost (the median of its runs'
costs weighed by 1 / cost, the point figure that minimises each job's mean relative error over the
quote's own runs), and for its expected cost (overall, per job size, per spot-available-at-submit),
the total quoted over the total billed, how often billed cost exceeded the quote's hold (the
budget's 90th percentile; about 10% if the quote's spread is right), and, as a reference, the
hindsight floor: the median error of the best single figure per pool and job size chosen after
seeing every start's bill. Those jobs never miss (on-demand is the deadline's safety net), so
P(meet) is also calibrated on spot-only jobs (work 0.3-0.7 of the window) that can: Brier score and
a reliability table over all jobs. Baseline in the same run: the single-plan expected cost (spot to
the end) that the scheduler used to record. Limitation: this replays decide() on the spot simulator,
not the whole scheduler and reconciler on a simulated clock; the simulator bills whole ticks, stalls
nothing for checkpoints and loses no work on a preemption.
"""

from __future__ import annotations

import argparse
import json
import statistics
import zlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from api.placement.estimate import policy_quote
from api.placement.options import Market, first, outcome
from api.placement.quote import Quote
from api.placement.snapshot import JobState, Snapshot
from api.placement.world import OBSERVATION_WINDOW
from api.pricing.preemption import PreemptionPrior, default_priors
from api.settings import Settings
from benchmarks.spot.adapter import SIM_EPOCH, OursPolicy
from benchmarks.spot.observed import learned_before
from benchmarks.spot.simulator import CHANGEOVER_HOURS, Cadence, Setting, load_trace, simulate
from benchmarks.spot.standby import OursStandbyPolicy
from gpujobs.spec import CapacitySpec, CapacityType

DEADLINE_HOURS = 48.0
FRACTIONS = (0.6, 0.75, 0.9)
# Jobs that may only use spot: the deadline can be missed, so P(meet) has something to predict.
SPOT_ONLY_FRACTIONS = (0.3, 0.5, 0.7)
SEED = 20240416
SETS = ("availability/1-node/aws-02-15-2023", "availability/1-node/aws-10-26-2022")


def _quote(
    policy: OursPolicy, spot_now: bool, learned: PreemptionPrior, *, standby: bool
) -> tuple[Quote, float]:
    """The quote admission records: policy_quote() on the snapshot the scheduler would see at
    submit (the shipped priors for the pool, decide()'s restart time and reaction time, whether
    spot is there now), for the job the replay runs. The simulator bills no checkpoint stall and
    loses no work on a preemption (a save on the notice that costs nothing), so that is the
    job's measured checkpoint cost here."""
    s = policy.setting
    job = JobState(
        id="job",
        team="sim",
        spec=policy.spec,
        submitted_at=SIM_EPOCH,
        deadline_at=SIM_EPOCH + timedelta(hours=s.deadline * s.gap_hours),
        remaining_hours=s.work * s.gap_hours,
        checkpoint_cost_seconds=0.0,
    )
    unavailable = (
        frozenset()
        if spot_now
        else frozenset({(policy.offer.zone, policy.offer.instance_type, CapacityType.SPOT)})
    )
    snap = Snapshot(
        now=SIM_EPOCH,
        jobs=(job,),
        offers=(policy.offer,),
        unavailable=unavailable,
        rates={(policy.offer.zone, policy.offer.instance_type): learned},
        restart_hours=s.changeover * s.gap_hours,
        step_hours=s.gap_hours,
        standby=standby,
    )
    market = Market(snap)
    q = policy_quote(market, job)
    assert q is not None  # spot and on-demand are both there
    spot = first(market.spot(job), waiting=True)
    assert spot is not None
    single = outcome(job, spot, s.deadline * s.gap_hours).expected_cost
    return q, single


def _replay(task: tuple[Path, str, int, bool, bool]) -> list[dict[str, Any]]:
    path, set_name, starts, spot_only, standby = task
    fractions = SPOT_ONLY_FRACTIONS if spot_only else FRACTIONS
    rows: list[dict[str, Any]] = []
    trace = load_trace(path)
    cadence = Cadence.production()
    salt = b"spot-only" if spot_only else b""
    rng = np.random.default_rng(SEED + zlib.crc32(path.stem.encode() + salt))
    for fraction in fractions:
        setting = Setting.from_hours(
            trace,
            work_hours=fraction * DEADLINE_HOURS,
            deadline_hours=DEADLINE_HOURS,
            changeover_hours=CHANGEOVER_HOURS,
        )
        high = len(trace.available) - setting.deadline - setting.changeover - 1
        low = int(OBSERVATION_WINDOW.total_seconds() / 3600.0 / trace.gap_hours)
        for start in low + rng.choice(high - low, size=starts, replace=False):
            offer = OursPolicy(trace.name, setting).offer
            prior = default_priors().lookup(
                zone=offer.zone,
                region=offer.region,
                instance_type=offer.instance_type,
                cloud=offer.cloud,
            )
            learned, seen = learned_before(
                trace.available,
                int(start),
                prior=prior,
                gap_hours=trace.gap_hours,
                retry_seconds=cadence.retry_seconds,
                epoch=SIM_EPOCH - timedelta(hours=int(start) * trace.gap_hours),
            )
            # with make-before-break, as production admits by default (GPUJOBS_STANDBY)
            replayed = OursStandbyPolicy if standby else OursPolicy
            policy = replayed(trace.name, setting, prior=prior, seen=[seen])
            if spot_only:
                capacity = CapacitySpec.model_validate({"types": ["spot"]})
                policy.spec = policy.spec.model_copy(update={"capacity": capacity})
            now = bool(trace.available[start])
            q, single = _quote(policy, now, learned, standby=standby)
            billed = simulate(trace.available, int(start), setting, policy, cadence)
            rows.append(
                {
                    "trace": f"{set_name}/{path.stem}",
                    "fraction": fraction,
                    "spot_only": spot_only,
                    "start": int(start),
                    "spot_now": now,
                    "billed": round(billed.cost, 4),
                    "met": billed.met_deadline,
                    "quote": round(q.expected_cost, 4),
                    "hold": round(q.hold_cost, 4),
                    "typical": round(q.typical_cost, 4),
                    "p_meet": round(q.p_meet_deadline, 4),
                    "single_plan": round(single, 4),
                }
            )
    return rows


def _error(rows: list[dict[str, Any]], key: str = "quote") -> float:
    return round(statistics.median(abs(r[key] - r["billed"]) / r["billed"] for r in rows), 4)


def _hindsight_floor(rows: list[dict[str, Any]]) -> float:
    """The median error of the best single figure per pool and job size, chosen after seeing
    what every start billed: no quote that knows only the pool and the job does better."""
    cells: dict[tuple[str, float], list[float]] = {}
    for r in rows:
        cells.setdefault((r["trace"], r["fraction"]), []).append(r["billed"])
    errors: list[float] = []
    for billed in cells.values():
        best = min(
            (sorted(abs(c - b) / b for b in billed) for c in billed),
            key=lambda e: statistics.median(e),
        )
        errors += best
    return round(statistics.median(errors), 4)


def _calibration(rows: list[dict[str, Any]]) -> dict[str, Any]:
    bins: dict[str, list[tuple[float, bool]]] = {}
    for r in rows:
        low = min(0.9, int(r["p_meet"] * 10) / 10)
        bins.setdefault(f"{low:.1f}-{low + 0.1:.1f}", []).append((r["p_meet"], bool(r["met"])))
    brier = statistics.fmean((r["p_meet"] - (1.0 if r["met"] else 0.0)) ** 2 for r in rows)
    return {
        "brier": round(brier, 4),
        "reliability": {
            k: {
                "jobs": len(v),
                "quoted": round(statistics.fmean(p for p, _ in v), 4),
                "met": round(sum(m for _, m in v) / len(v), 4),
            }
            for k, v in sorted(bins.items())
        },
    }


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=root.parent.parent / "shared" / "data")
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--out", type=Path, default=root / "results" / "quote_calibration.json")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--standby",
        action=argparse.BooleanOptionalAction,
        default=Settings().standby,
        help="make-before-break in the quote and the replay (default: the service's default)",
    )
    args = parser.parse_args(argv)
    tasks = [
        (path, set_name, args.starts, spot_only, args.standby)
        for set_name in SETS
        for path in sorted((args.data / "spot-traces" / set_name).glob("*.json"))
        if "v100_1" in path.stem  # the p3.2xlarge traces: one offer, one price
        for spot_only in (False, True)
    ]
    if args.workers > 1:
        from multiprocessing import Pool

        with Pool(args.workers) as pool:
            done = pool.map(_replay, tasks, chunksize=1)
    else:
        done = [_replay(task) for task in tasks]
    rows = [row for task, part in zip(tasks, done, strict=True) if not task[3] for row in part]
    spot_rows = [row for task, part in zip(tasks, done, strict=True) if task[3] for row in part]
    if not rows:
        parser.error(f"--data {args.data}: no p3.2xlarge traces under spot-traces/{SETS[0]}")
    everything = _calibration(rows + spot_rows)
    result = {
        "setting": {
            "deadline_hours": DEADLINE_HOURS,
            "changeover_hours": CHANGEOVER_HOURS,
            "fractions": FRACTIONS,
            "spot_only_fractions": SPOT_ONLY_FRACTIONS,
            "starts_per_trace_and_fraction": args.starts,
            "trace_sets": SETS,
            "seed": SEED,
            "standby": args.standby,
        },
        "jobs": len(rows),
        "median_abs_error_typical": _error(rows, "typical"),
        "median_abs_error_quote": _error(rows),
        "median_abs_error_single_plan_baseline": _error(rows, "single_plan"),
        "median_abs_error_hindsight_floor": _hindsight_floor(rows),
        "median_abs_error_by_fraction": {
            str(f): _error([r for r in rows if r["fraction"] == f]) for f in FRACTIONS
        },
        "median_abs_error_by_spot_now": {
            str(now): _error([r for r in rows if r["spot_now"] == now]) for now in (True, False)
        },
        "quoted_over_billed_total": round(
            sum(r["quote"] for r in rows) / sum(r["billed"] for r in rows), 4
        ),
        "billed_over_hold_share": round(sum(r["billed"] > r["hold"] for r in rows) / len(rows), 4),
        "deadline_misses": sum(not r["met"] for r in rows),
        "spot_only_jobs": len(spot_rows),
        "spot_only_deadline_misses": sum(not r["met"] for r in spot_rows),
        "brier_p_meet": everything["brier"],
        "reliability": everything["reliability"],
        "brier_p_meet_spot_only": _calibration(spot_rows)["brier"],
        "goal": "median |quote - billed| / billed <= 0.10 (the likely cost); P(meet) calibrated",
        "rows": rows + spot_rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()

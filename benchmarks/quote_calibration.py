"""Quote calibration: the quote at submit against what the policy then costs on real traces.

    python -m benchmarks.quote_calibration --data ../shared/data

For jobs of several sizes (work = 0.6-0.9 of a 48 h deadline) submitted at seeded random start
times on each 1-node availability trace, the quote (api.placement.quote, with what the service
knows at submit: the zone's preemption prior as the service looks it up, which for these zones
was fitted on these same traces, and whether spot is there now) is compared with
the cost of the same job replayed tick by tick through the shipped decide() on the trace
(benchmarks/spot: the adapter the spot policy benchmark uses, learning the rate as it goes).
Reported: median |quote - billed| / billed, the Brier score of P(meet the deadline) and a
reliability table, and how often billed cost exceeded the quote's hold (the budget's 90th
percentile). Baseline in the same run: the single-plan expected cost (spot to the end) that the
scheduler used to record. Limitation: this replays decide() on the spot simulator, not the whole
scheduler and reconciler on a simulated clock.
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

from api.placement.options import Option, outcome
from api.placement.quote import Quote, quote
from api.placement.snapshot import JobState
from api.pricing.cost_model import Risk
from api.pricing.preemption import default_priors
from benchmarks.spot.adapter import SIM_EPOCH, OursPolicy
from benchmarks.spot.simulator import CHANGEOVER_HOURS, Setting, load_trace, simulate
from gpujobs.spec import CapacityType

DEADLINE_HOURS = 48.0
FRACTIONS = (0.6, 0.75, 0.9)
SEED = 20240416
SETS = ("availability/1-node/aws-02-15-2023", "availability/1-node/aws-10-26-2022")


def _quote(policy: OursPolicy, work_hours: float, spot_now: bool) -> tuple[Quote, float]:
    offer = policy.offer
    prior = default_priors().lookup(
        zone=offer.zone, region=offer.region, instance_type=offer.instance_type
    )
    job = JobState(
        id="job",
        team="sim",
        spec=policy.spec,
        submitted_at=SIM_EPOCH,
        deadline_at=SIM_EPOCH + timedelta(hours=DEADLINE_HOURS),
        remaining_hours=work_hours,
    )
    base = Risk(restart_hours=CHANGEOVER_HOURS)
    spot = Option(
        policy.offer,
        CapacityType.SPOT,
        policy.offer.spot_price or 0.0,
        Risk(prior.rate, prior.mtta_hours, CHANGEOVER_HOURS),
        lifetime_hours=1.0 / prior.rate,
    )
    od = Option(policy.offer, CapacityType.ON_DEMAND, policy.offer.on_demand_price or 0.0, base)
    q = quote(
        job,
        spot=spot,
        on_demand=od,
        reserved=None,
        spot_available_now=spot_now,
        restart_hours=CHANGEOVER_HOURS,
        hours_left=DEADLINE_HOURS,
    )
    assert q is not None  # spot and on-demand are both there
    single = outcome(job, spot, DEADLINE_HOURS).expected_cost
    return q, single


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=root / ".." / "shared" / "data")
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--out", type=Path, default=root / "results" / "quote_calibration.json")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for set_name in SETS:
        for path in sorted((args.data / "spot-traces" / set_name).glob("*.json")):
            if "v100_1" not in path.stem:
                continue  # the p3.2xlarge traces: one offer, one price
            trace = load_trace(path)
            rng = np.random.default_rng(SEED + zlib.crc32(path.stem.encode()))
            for fraction in FRACTIONS:
                work = fraction * DEADLINE_HOURS
                setting = Setting.from_hours(
                    trace,
                    work_hours=work,
                    deadline_hours=DEADLINE_HOURS,
                    changeover_hours=CHANGEOVER_HOURS,
                )
                high = len(trace.available) - setting.deadline - setting.changeover - 1
                for start in rng.choice(high, size=args.starts, replace=False):
                    policy = OursPolicy(trace.name, setting)
                    q, single = _quote(policy, work, bool(trace.available[start]))
                    billed = simulate(trace.available, int(start), setting, policy)
                    rows.append(
                        {
                            "trace": f"{set_name}/{path.stem}",
                            "fraction": fraction,
                            "start": int(start),
                            "billed": round(billed.cost, 4),
                            "met": billed.met_deadline,
                            "quote": round(q.expected_cost, 4),
                            "hold": round(q.hold_cost, 4),
                            "p_meet": round(q.p_meet_deadline, 4),
                            "single_plan": round(single, 4),
                        }
                    )
    err = [abs(r["quote"] - r["billed"]) / r["billed"] for r in rows]
    err_single = [abs(r["single_plan"] - r["billed"]) / r["billed"] for r in rows]
    brier = statistics.fmean((r["p_meet"] - (1.0 if r["met"] else 0.0)) ** 2 for r in rows)
    bins: dict[str, list[bool]] = {}
    for r in rows:
        low = min(0.9, int(r["p_meet"] * 10) / 10)
        bins.setdefault(f"{low:.1f}-{low + 0.1:.1f}", []).append(bool(r["met"]))
    result = {
        "setting": {
            "deadline_hours": DEADLINE_HOURS,
            "changeover_hours": CHANGEOVER_HOURS,
            "fractions": FRACTIONS,
            "starts_per_trace_and_fraction": args.starts,
            "trace_sets": SETS,
            "seed": SEED,
        },
        "jobs": len(rows),
        "median_abs_error_quote": round(statistics.median(err), 4),
        "median_abs_error_single_plan_baseline": round(statistics.median(err_single), 4),
        "billed_over_hold_share": round(sum(r["billed"] > r["hold"] for r in rows) / len(rows), 4),
        "brier_p_meet": round(brier, 4),
        "reliability": {
            k: {"jobs": len(v), "met": round(sum(v) / len(v), 4)} for k, v in sorted(bins.items())
        },
        "deadline_misses": sum(not r["met"] for r in rows),
        "goal": "median |quote - billed| / billed <= 0.10; P(meet) calibrated",
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()

"""Spot policy benchmark (the rules of "Can't Be Late", Wu et al., NSDI'24): the command line.

`python -m benchmarks.spot_policy --data DIR` runs every policy over the trace sets, single-zone
(three cost settings) and multi-zone, and writes benchmarks/results/spot_policy.json;
`--trace FILE --policy NAME --work-hours H` runs one job.

Policies: on_demand, greedy, uniform_progress (the paper's rules 1-3 plus the safety net),
omniscient (dynamic programming over the known traces) and ours: the shipped `decide()`, called
through an adapter that builds a one-job snapshot each time it is asked, with what a running
service had learned of each zone in the week before the job (observed.py) and learns from the
job's own attempts. Online policies see spot availability only as launch attempts reveal it,
retried at production's cadence (simulator.py).
The pieces live in benchmarks/spot/: simulator, policies (baselines), omniscient, adapter (ours),
experiment.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.spot.experiment import (
    DEADLINE_HOURS,
    POLICIES,
    START_TICKS,
    run_benchmark,
    single_run,
)
from benchmarks.spot.simulator import CHANGEOVER_HOURS


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description="Spot policy benchmark (Can't Be Late rules).")
    parser.add_argument("--data", type=Path, default=root / ".." / "shared" / "data")
    parser.add_argument("--starts", type=int, default=START_TICKS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--out", type=Path, default=root / "benchmarks" / "results" / "spot_policy.json"
    )
    parser.add_argument("--trace")
    parser.add_argument("--policy", choices=POLICIES)
    parser.add_argument("--work-hours", type=float)
    parser.add_argument("--deadline-hours", type=float, default=DEADLINE_HOURS)
    parser.add_argument("--changeover-hours", type=float, default=CHANGEOVER_HOURS)
    parser.add_argument("--start-tick", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.trace:
        if not args.policy or args.work_hours is None:
            parser.error("--trace needs --policy and --work-hours")
        out = single_run(args)
        print(json.dumps(out) if args.json else json.dumps(out, indent=1))
        return
    result = run_benchmark(args.data, args.starts, args.workers)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    summaries = {k: result[k]["summary"] for k in ("single_zone", "multi_zone")}  # type: ignore[index]
    print(json.dumps(summaries, indent=1))


if __name__ == "__main__":
    main()

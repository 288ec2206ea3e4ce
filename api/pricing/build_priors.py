"""Build data/spot_priors.json from the spot availability traces.

    python -m api.pricing.build_priors --data ../shared/data

Per trace: preemption rate = available->unavailable transitions per available hour; MTTA = mean
length of an unavailable run; the coefficients of variation of available and unavailable run
lengths (runs cut by a trace's ends are left out), which the quote's availability model needs.
Only GPU traces are used (the CPU preemption traces say little about GPU capacity). The default
pools every trace. Each prior weighs at most MAX_PRIOR_HOURS of observation so that what the
service itself observes can move it (posterior_rate).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import defaultdict
from pathlib import Path

from api.pricing.preemption import PRIORS_FILE

MAX_PRIOR_HOURS = 48.0
INSTANCE = {
    "v100_1": "p3.2xlarge",
    "v100_8": "p3.16xlarge",
    "k80_1": "p2.xlarge",
    "k80_8": "p2.8xlarge",
}
SOURCE = "skypilot-org/spot-traces @ 221da1a (shared/data/spot-traces)"


class Stats:
    def __init__(self) -> None:
        self.up_hours = self.down_hours = 0.0
        self.preemptions = self.recoveries = 0
        # Complete runs per state (available, unavailable): count, sum, sum of squares (hours).
        self.runs: dict[bool, list[float]] = {True: [0.0, 0.0, 0.0], False: [0.0, 0.0, 0.0]}

    def add(self, values: list[int], gap_hours: float) -> None:
        avail = [v > 0 for v in values]
        self.up_hours += sum(avail) * gap_hours
        self.down_hours += (len(avail) - sum(avail)) * gap_hours
        for a, b in zip(avail, avail[1:], strict=False):
            self.preemptions += a and not b
            self.recoveries += b and not a
        changes = [i for i in range(1, len(avail)) if avail[i] != avail[i - 1]]
        for begin, end in zip(changes, changes[1:], strict=False):
            run = self.runs[avail[begin]]
            length = (end - begin) * gap_hours
            run[0] += 1.0
            run[1] += length
            run[2] += length * length

    def cv(self, up: bool) -> float:
        n, total, squares = self.runs[up]
        if n < 2:
            return 1.0  # too few runs to say: memoryless
        mean = total / n
        return round(math.sqrt(max(0.0, squares / n - mean * mean)) / mean, 4)

    def prior(self) -> dict[str, float]:
        weight = min(1.0, MAX_PRIOR_HOURS / max(self.up_hours, 1e-9))
        beta = self.up_hours * weight
        alpha = max(self.preemptions, 1) * weight  # at least one pseudo-event: rate never 0
        total = self.up_hours + self.down_hours
        return {
            "alpha": round(alpha, 6),
            "beta": round(beta, 6),
            "rate_per_hour": round(alpha / beta, 6),
            "mtta_hours": round(self.down_hours / max(self.recoveries, 1), 4),
            "availability": round(self.up_hours / total, 4) if total else 0.0,
            "up_cv": self.cv(True),
            "down_cv": self.cv(False),
            "observed_hours": round(total, 1),
        }


def build(data: Path) -> dict[str, object]:
    zones: dict[tuple[str, str], Stats] = defaultdict(Stats)
    regions: dict[tuple[str, str], Stats] = defaultdict(Stats)
    pooled = Stats()
    for path in sorted((data / "spot-traces").rglob("*.json")):
        match = re.match(r"(?P<zone>[a-z]+-[a-z]+-\d[a-z])_(?P<kind>[a-z0-9]+_\d+)$", path.stem)
        if match is None or match["kind"] not in INSTANCE:
            continue
        raw = json.loads(path.read_text())
        values = [int(v) for v in raw["data"]]
        gap_hours = float(raw["metadata"]["gap_seconds"]) / 3600.0
        instance = INSTANCE[match["kind"]]
        zone = match["zone"]
        for stats in (zones[(zone, instance)], regions[(zone[:-1], instance)], pooled):
            stats.add(values, gap_hours)

    def rows(table: dict[tuple[str, str], Stats]) -> list[dict[str, object]]:
        return [
            {"where": where, "instance_type": it, **stats.prior()}
            for (where, it), stats in sorted(table.items())
        ]

    return {
        "source": SOURCE,
        "method": __doc__.strip().splitlines()[3],
        "default": pooled.prior(),
        "zones": rows(zones),
        "regions": rows(regions),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=PRIORS_FILE)
    args = parser.parse_args(argv)
    result = build(args.data)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"default {result['default']} -> {args.out}")


if __name__ == "__main__":
    main()

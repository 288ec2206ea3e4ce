"""Build data/spot_priors.json from the spot traces: hierarchical priors and the gang fit.

    python -m api.pricing.build_priors --data ../shared/data

Per group of GPU traces, the preemption rate is node losses per node-hour up and MTTA the mean
unavailable run (multi-node traces count each node: a drop from 16 to 13 is three losses).
Groups form a hierarchy: zone x instance type, region x instance type, region x family, family
(p3, p2 across regions), zone and region (any GPU type), and the pooled default. The prior of a
pool the traces did not see is its nearest group's mean m with the strength the spread between
zones supports: Gamma(kappa m, kappa), kappa = m / v, v the between-zone variance (method of
moments, Poisson noise removed), so that a few hours of the service's own observations move it.
A traced zone keeps its own record, capped at MAX_PRIOR_HOURS so that it can still drift.
MTTA (the mean unavailable run) moves with the outages the service sees, with as many
pseudo-outages as the rate has pseudo-preemptions (preemption.posterior). Each group keeps the
coefficients of variation of its available and unavailable run lengths (runs cut by a trace's
ends left out; 1 is memoryless), which the quote's availability model needs.

AWS catalog zones are zone ids (use1-az4); the traces name zones (us-east-1a). In the oldest
regions (us-east-1 and us-west-2 among them) AWS maps names to ids per account and the data does
not hold the traces' account's mapping, so there a catalog zone is matched by region (the mean
over the region's traced zones is the expectation over the unknown mapping) and the service's
own observations of that zone id do the rest. Regions introduced after November 2012 map names
to ids uniformly (AWS, "AZ IDs"): there the traces' zone is the catalog's (ZONE_IDS).

Gang: a gang of n nodes stops when any node is lost. The 4- and 16-node traces give, in the same
zone and time, the per-node loss rate l1 and the rate g(n) at which a full gang loses a node;
nodes preempted independently would give g(n) = n * l1. Fitted: g(n) = l1 * n ** GAMMA (maximum
likelihood over the traces, Poisson gang events).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from api.pricing.preemption import PRIORS_FILE, family_of

MAX_PRIOR_HOURS = 48.0
INSTANCE = {
    "v100_1": "p3.2xlarge",
    "v100_8": "p3.16xlarge",
    "k80_1": "p2.xlarge",
    "k80_8": "p2.8xlarge",
}
# Traced zones in uniformly mapped regions (us-east-2, 2016): name -> AZ id, as in every account.
ZONE_IDS = {"us-east-2a": "use2-az1", "us-east-2b": "use2-az2", "us-east-2c": "use2-az3"}
CLOUD = "aws"  # every GPU trace is AWS (the GCP traces are CPU machines)
SOURCE = "skypilot-org/spot-traces @ 221da1a (shared/data/spot-traces)"
TRACE = re.compile(r"(?P<zone>[a-z]+-[a-z]+-\d[a-z])_(?P<kind>[a-z0-9]+_\d+)$")


class Stats:
    """Node-level counts of one group of traces."""

    def __init__(self) -> None:
        self.up_hours = self.down_hours = 0.0
        self.preemptions = self.recoveries = 0
        # Complete runs per state (available, unavailable): count, sum, sum of squares (hours).
        self.runs: dict[bool, list[float]] = {True: [0.0, 0.0, 0.0], False: [0.0, 0.0, 0.0]}

    def add(self, values: list[int], gap_hours: float, nodes: int) -> None:
        self.up_hours += sum(values) * gap_hours
        self.down_hours += sum(nodes - v for v in values) * gap_hours
        for a, b in zip(values, values[1:], strict=False):
            self.preemptions += max(0, a - b)
            self.recoveries += max(0, b - a)
        avail = [v > 0 for v in values]
        changes = [i for i in range(1, len(avail)) if avail[i] != avail[i - 1]]
        for begin, end in zip(changes, changes[1:], strict=False):
            run = self.runs[avail[begin]]
            length = (end - begin) * gap_hours
            run[0] += 1.0
            run[1] += length
            run[2] += length * length

    def merge(self, other: Stats) -> None:
        self.up_hours += other.up_hours
        self.down_hours += other.down_hours
        self.preemptions += other.preemptions
        self.recoveries += other.recoveries
        for state in (True, False):
            self.runs[state] = [
                a + b for a, b in zip(self.runs[state], other.runs[state], strict=True)
            ]

    def cv(self, up: bool) -> float:
        n, total, squares = self.runs[up]
        if n < 2:
            return 1.0  # too few runs to say: memoryless
        mean = total / n
        return round(math.sqrt(max(0.0, squares / n - mean * mean)) / mean, 4)

    @property
    def rate(self) -> float:
        return max(self.preemptions, 1) / max(self.up_hours, 1e-9)  # never 0

    @property
    def availability(self) -> float:
        total = self.up_hours + self.down_hours
        return self.up_hours / total if total else 0.0

    def prior(self, *, strength: float | None) -> dict[str, float]:
        """Gamma(alpha, beta) on the rate: the group's own record (capped) when `strength` is
        None, else its mean with `strength` pseudo-hours; MTTA and availability as recorded."""
        beta = min(self.up_hours, MAX_PRIOR_HOURS) if strength is None else strength
        return {
            "alpha": round(self.rate * beta, 6),
            "beta": round(beta, 6),
            "rate_per_hour": round(self.rate, 6),
            "mtta_hours": round(self.down_hours / max(self.recoveries, 1), 4),
            "availability": round(self.availability, 4),
            "up_cv": self.cv(True),
            "down_cv": self.cv(False),
            "observed_hours": round(self.up_hours + self.down_hours, 1),
        }


def _traces(data: Path) -> Iterable[tuple[str, str, int, list[int], float]]:
    """(zone, instance type, nodes, values, tick hours) of every GPU trace."""
    for path in sorted((data / "spot-traces").rglob("*.json")):
        match = TRACE.match(path.stem)
        if match is None or match["kind"] not in INSTANCE:
            continue
        raw = json.loads(path.read_text())
        values = [int(v) for v in raw["data"]]
        nodes = int(path.parent.parent.name.split("-")[0])
        yield match["zone"], INSTANCE[match["kind"]], nodes, values, raw["metadata"]["gap_seconds"]


def rate_strength(zones: Iterable[Stats]) -> float:
    """Pseudo-hours of a Gamma prior matching the spread of zone rates (method of moments)."""
    groups = [s for s in zones if s.up_hours > 0]
    total = sum(s.up_hours for s in groups)
    mean = sum(s.preemptions for s in groups) / total
    spread = sum(s.up_hours * (s.rate - mean) ** 2 for s in groups) / total
    noise = len(groups) * mean / total  # the Poisson part of the spread: mean / hours, weighted
    between = max(spread - noise, 1e-6)
    return mean / between


def gang_fit(data: Path) -> dict[str, object]:
    """GAMMA in g(n) = l1 * n ** GAMMA by maximum likelihood over the multi-node traces."""
    fits: list[tuple[int, float, float, int]] = []  # nodes, l1, hours full, gang preemptions
    rows = []
    for zone, _, nodes, values, gap_s in _traces(data):
        if nodes == 1:
            continue
        gap = gap_s / 3600.0
        pairs = list(zip(values, values[1:], strict=False))
        node_rate = sum(max(0, a - b) for a, b in pairs) / (sum(values) * gap)
        full_hours = sum(v == nodes for v in values) * gap
        gang = sum(a == nodes and b < nodes for a, b in pairs)
        fits.append((nodes, node_rate, full_hours, gang))
        rows.append(
            {
                "zone": zone,
                "nodes": nodes,
                "node_rate": round(node_rate, 4),
                "full_hours": round(full_hours, 1),
                "gang_preemptions": gang,
                "gang_rate": round(gang / full_hours, 4),
                "independent_rate": round(nodes * node_rate, 4),
            }
        )

    def score(gamma: float) -> float:
        """d log-likelihood / d gamma: decreasing in gamma, so bisection finds its root."""
        return sum(
            math.log(n) * (gang - l1 * hours * math.pow(n, gamma)) for n, l1, hours, gang in fits
        )

    lo, hi = 0.0, 1.0
    if score(lo) <= 0:
        gamma = lo
    elif score(hi) >= 0:
        gamma = hi
    else:
        for _ in range(60):
            mid = (lo + hi) / 2.0
            lo, hi = (mid, hi) if score(mid) > 0 else (lo, mid)
        gamma = (lo + hi) / 2.0
    return {"exponent": round(gamma, 4), "traces": rows}


def build(data: Path) -> dict[str, object]:
    zones: dict[tuple[str, str], Stats] = defaultdict(Stats)
    for zone, instance, nodes, values, gap_s in _traces(data):
        zones[(zone, instance)].add(values, gap_s / 3600.0, nodes)
    regions: dict[tuple[str, str], Stats] = defaultdict(Stats)
    region_families: dict[tuple[str, str], Stats] = defaultdict(Stats)
    families: dict[tuple[str, str], Stats] = defaultdict(Stats)
    clouds: dict[tuple[str, str], Stats] = defaultdict(Stats)
    cloud_zones: dict[tuple[str, str], Stats] = defaultdict(Stats)
    by_id: dict[tuple[str, str], Stats] = {}
    pooled = Stats()
    for (zone, instance), stats in zones.items():
        region, family = zone[:-1], family_of(instance)
        if zone in ZONE_IDS:
            by_id[(ZONE_IDS[zone], instance)] = stats
            cloud_zones[(CLOUD, ZONE_IDS[zone])].merge(stats)
        for table, key in (
            (regions, (region, instance)),
            (region_families, (region, family)),
            (families, (CLOUD, family)),
            (clouds, (CLOUD, region)),
        ):
            table[key].merge(stats)
        pooled.merge(stats)
    kappa = rate_strength(zones.values())

    def rows(
        table: dict[tuple[str, str], Stats], key: str, *, own: bool = False
    ) -> list[dict[str, object]]:
        strength = None if own else kappa
        return [
            {"where": where, key: what, **s.prior(strength=strength)}
            for (where, what), s in sorted(table.items())
        ]

    return {
        "source": SOURCE,
        "method": "api/pricing/build_priors.py (module docstring)",
        "rate_strength_hours": round(kappa, 4),
        "default": pooled.prior(strength=kappa),
        "zones": rows(zones | by_id, "instance_type", own=True),
        "regions": rows(regions, "instance_type"),
        "region_families": rows(region_families, "family"),
        "families": rows(families, "family"),
        "cloud_zones": rows(cloud_zones, "zone"),
        "cloud_regions": rows(clouds, "region"),
        "gang": gang_fit(data),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=PRIORS_FILE)
    args = parser.parse_args(argv)
    result = build(args.data)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"default {result['default']}, gang {result['gang']} -> {args.out}")


if __name__ == "__main__":
    main()

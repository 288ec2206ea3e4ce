"""Preemption priors per spot pool and their conjugate updates.

A spot instance's preemptions are modelled as a Poisson process with an unknown rate; the prior
on the rate is Gamma(alpha, beta) (beta in spot-hours), so after observing n preemptions in T
spot-hours the posterior is Gamma(alpha + n, beta + T) and its mean is (alpha + n) / (beta + T).
The mean time to availability (MTTA) moves with the outages the service saw (learning.py).
The shipped priors (data/spot_priors.json) come from the spot traces by build_priors: a
hierarchy (zone, region, GPU family, cloud region, pooled default) and the gang exponent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

PRIORS_FILE = Path(__file__).parent / "data" / "spot_priors.json"


@dataclass(frozen=True, slots=True)
class PreemptionPrior:
    alpha: float  # Gamma shape: pseudo-count of preemptions
    beta: float  # Gamma rate: pseudo spot-hours
    mtta_hours: float  # mean time until spot is available again after it is lost
    availability: float  # long-run fraction of time spot is available
    # Coefficients of variation of the lengths of available and unavailable runs: 1 is
    # memoryless; the traces' runs are burstier (most spot time comes in a few long runs).
    up_cv: float = 1.0
    down_cv: float = 1.0

    @property
    def rate(self) -> float:
        """Expected preemptions per spot-hour."""
        return self.alpha / self.beta

    @property
    def mean_lifetime_hours(self) -> float:
        return self.beta / self.alpha


def posterior_rate(
    prior: PreemptionPrior, observed_preemptions: float, observed_spot_hours: float
) -> PreemptionPrior:
    """The Gamma posterior after what the service observed (conjugate to the Poisson counts)."""
    if observed_preemptions < 0 or observed_spot_hours < 0:
        raise ValueError("observations must be non-negative")
    return replace(
        prior, alpha=prior.alpha + observed_preemptions, beta=prior.beta + observed_spot_hours
    )


def posterior(
    prior: PreemptionPrior,
    *,
    preemptions: float,
    spot_hours: float,
    outage_hours: float = 0.0,
    recoveries: float = 0.0,
) -> PreemptionPrior:
    """The pool's posterior: the rate as posterior_rate; the mean time to availability from the
    outages seen (hours without capacity and how many ended), with as many pseudo-outages as
    the rate prior has pseudo-preemptions (each preemption begins an outage); availability the
    alternating process's L / (L + M)."""
    if outage_hours < 0 or recoveries < 0:
        raise ValueError("observations must be non-negative")
    if not (preemptions or spot_hours or outage_hours or recoveries):
        return prior
    out = posterior_rate(prior, preemptions, spot_hours)
    weight = prior.alpha
    mtta = (weight * prior.mtta_hours + outage_hours) / max(weight + recoveries, 1e-9)
    life = out.mean_lifetime_hours
    return replace(out, mtta_hours=mtta, availability=life / (life + mtta) if life + mtta else 0.0)


def family_of(instance_type: str) -> str:
    """An instance type's family: p3 of p3.2xlarge (AWS), a2 of a2-highgpu-1g (GCP)."""
    return instance_type.split(".")[0].split("-")[0]


def gang_rate(rate: float, nodes: int, exponent: float = 1.0) -> float:
    """Rate at which a gang of `nodes` loses a node, from one node's `rate`: the traces' nodes
    are preempted together far more than independently (exponent 1 would be independent)."""
    return rate * math.pow(max(nodes, 1), exponent)


# Which level of the hierarchy a prior came from (most specific first).
LEVELS = ("zone", "region", "region_family", "family", "cloud_zone", "cloud_region", "default")


@dataclass(frozen=True, slots=True)
class Priors:
    by_zone: dict[tuple[str, str], PreemptionPrior]  # (zone, instance type)
    by_region: dict[tuple[str, str], PreemptionPrior]  # (region, instance type)
    default: PreemptionPrior
    by_region_family: dict[tuple[str, str], PreemptionPrior] = field(default_factory=dict)
    by_family: dict[tuple[str, str], PreemptionPrior] = field(default_factory=dict)  # (cloud, f)
    by_cloud_zone: dict[tuple[str, str], PreemptionPrior] = field(default_factory=dict)
    by_cloud_region: dict[tuple[str, str], PreemptionPrior] = field(default_factory=dict)
    gang_exponent: float = 1.0  # gang_rate's; 1: nodes independent

    def level(
        self, *, zone: str, region: str, instance_type: str, cloud: str = ""
    ) -> tuple[str, PreemptionPrior]:
        """Most specific prior known and its level. AWS catalog zones are zone ids; the traces'
        zone names map to them per account in the oldest regions (not in the data): there they
        match from region on (build_priors)."""
        family = family_of(instance_type)
        for name, found in (
            ("zone", self.by_zone.get((zone, instance_type))),
            ("region", self.by_region.get((region, instance_type))),
            ("region_family", self.by_region_family.get((region, family))),
            ("family", self.by_family.get((cloud, family))),
            ("cloud_zone", self.by_cloud_zone.get((cloud, zone))),
            ("cloud_region", self.by_cloud_region.get((cloud, region))),
        ):
            if found is not None:
                return name, found
        return "default", self.default

    def lookup(
        self, *, zone: str, region: str, instance_type: str, cloud: str = ""
    ) -> PreemptionPrior:
        return self.level(zone=zone, region=region, instance_type=instance_type, cloud=cloud)[1]

    def gang_rate(self, rate: float, nodes: int) -> float:
        return gang_rate(rate, nodes, self.gang_exponent)


def _prior(raw: dict[str, float]) -> PreemptionPrior:
    return PreemptionPrior(
        float(raw["alpha"]),
        float(raw["beta"]),
        float(raw["mtta_hours"]),
        float(raw["availability"]),
        float(raw.get("up_cv", 1.0)),
        float(raw.get("down_cv", 1.0)),
    )


def parse_priors(raw: dict[str, object]) -> Priors:
    def table(name: str, key: str = "instance_type") -> dict[tuple[str, str], PreemptionPrior]:
        rows = raw.get(name, [])
        assert isinstance(rows, list)
        return {(r["where"], r[key]): _prior(r) for r in rows}

    default = raw["default"]
    assert isinstance(default, dict)
    gang = raw.get("gang", {})
    assert isinstance(gang, dict)
    return Priors(
        table("zones"),
        table("regions"),
        _prior(default),
        by_region_family=table("region_families", "family"),
        by_family=table("families", "family"),
        by_cloud_zone=table("cloud_zones", "zone"),
        by_cloud_region=table("cloud_regions", "region"),
        gang_exponent=float(gang.get("exponent", 1.0)),
    )


def load_priors(path: Path = PRIORS_FILE) -> Priors:
    return parse_priors(json.loads(path.read_text()))


@lru_cache(maxsize=1)
def default_priors() -> Priors:
    return load_priors()

"""Preemption priors per (zone, instance type) and their Gamma-Poisson update.

A spot instance's preemptions are modelled as a Poisson process with an unknown rate; the prior
on the rate is Gamma(alpha, beta) (beta in spot-hours), so after observing n preemptions in T
spot-hours the posterior is Gamma(alpha + n, beta + T) and its mean is (alpha + n) / (beta + T).
The shipped priors (data/spot_priors.json) come from the spot traces by build_priors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
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
    prior: PreemptionPrior, observed_preemptions: int, observed_spot_hours: float
) -> PreemptionPrior:
    """The Gamma posterior after what the service observed (conjugate to the Poisson counts)."""
    if observed_preemptions < 0 or observed_spot_hours < 0:
        raise ValueError("observations must be non-negative")
    return replace(
        prior, alpha=prior.alpha + observed_preemptions, beta=prior.beta + observed_spot_hours
    )


@dataclass(frozen=True, slots=True)
class Priors:
    by_zone: dict[tuple[str, str], PreemptionPrior]  # (zone, instance type)
    by_region: dict[tuple[str, str], PreemptionPrior]  # (region, instance type)
    default: PreemptionPrior

    def lookup(self, *, zone: str, region: str, instance_type: str) -> PreemptionPrior:
        """Most specific prior known: zone, then region (AWS catalog zones are zone ids that do
        not map to the traces' zone names), then the pooled default."""
        found = self.by_zone.get((zone, instance_type))
        if found is None:
            found = self.by_region.get((region, instance_type))
        return found or self.default


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
    def table(name: str) -> dict[tuple[str, str], PreemptionPrior]:
        rows = raw.get(name, [])
        assert isinstance(rows, list)
        return {(r["where"], r["instance_type"]): _prior(r) for r in rows}

    default = raw["default"]
    assert isinstance(default, dict)
    return Priors(table("zones"), table("regions"), _prior(default))


def load_priors(path: Path = PRIORS_FILE) -> Priors:
    return parse_priors(json.loads(path.read_text()))


@lru_cache(maxsize=1)
def default_priors() -> Priors:
    return load_priors()

"""Per-requirement candidate lists, built once per decide() call and shared by every job that
asks for the same resources, so 10,000 jobs cost a few hundred catalog scans, not 10,000."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors
from gpujobs.spec import ResourcesSpec

Requirement = tuple[
    tuple[str, ...] | None, float | None, int, int, tuple[str, ...] | None, tuple[str, ...] | None
]


@dataclass(frozen=True, slots=True)
class SpotCandidate:
    offer: Offer
    prior: PreemptionPrior
    effective_price: float  # per node-hour of progress, after expected preemption losses


@dataclass(frozen=True, slots=True)
class Candidates:
    on_demand: tuple[Offer, ...]  # cheapest first
    spot: tuple[SpotCandidate, ...]  # cheapest expected cost first
    by_slot: Mapping[tuple[str, str], Offer]  # (zone, instance_type) -> offer, for reservations
    any_offer: bool


def requirement(resources: ResourcesSpec) -> Requirement:
    def norm(values: list[str] | None) -> tuple[str, ...] | None:
        return None if values is None else tuple(sorted(v.lower() for v in values))

    return (
        norm(resources.gpu_models),
        resources.min_gpu_memory_gb,
        resources.gpus_per_node,
        resources.nodes,
        norm(resources.clouds),
        norm(resources.regions),
    )


Match = Callable[[Offer, Requirement], bool]

# The one offer filter, one rule per resources field (feasibility names the first one that
# nothing meets). Model, cloud and region match case-insensitively; memory is per GPU; an offer
# is one node, so it must have exactly `gpus_per_node` GPUs.
FILTERS: tuple[tuple[str, Match], ...] = (
    ("gpu_models", lambda o, r: r[0] is None or o.gpu_model.lower() in r[0]),
    (
        "min_gpu_memory_gb",
        lambda o, r: r[1] is None or (o.gpu_memory_gb is not None and o.gpu_memory_gb >= r[1]),
    ),
    ("gpus_per_node", lambda o, r: o.gpu_count == r[2]),
    ("clouds", lambda o, r: r[4] is None or o.cloud.lower() in r[4]),
    ("regions", lambda o, r: r[5] is None or o.region.lower() in r[5]),
)


def matches(offer: Offer, key: Requirement) -> bool:
    return all(keep(offer, key) for _, keep in FILTERS)


class CandidateIndex:
    """Matches offers to requirements. The offer must have exactly `gpus_per_node` GPUs (one
    node = one instance); memory is per GPU; region and cloud match case-insensitively."""

    def __init__(
        self,
        offers: Sequence[Offer],
        *,
        priors: Priors,
        rates: Mapping[tuple[str, str], PreemptionPrior],
        restart_hours: float,
    ) -> None:
        self._offers = offers
        self._priors = priors
        self._rates = rates
        self._restart = restart_hours
        self._cache: dict[Requirement, Candidates] = {}
        self._prior_cache: dict[str, PreemptionPrior] = {}

    def prior(self, offer: Offer) -> PreemptionPrior:
        found = self._prior_cache.get(offer.key)
        if found is None:
            found = self._rates.get((offer.zone, offer.instance_type)) or self._priors.lookup(
                zone=offer.zone, region=offer.region, instance_type=offer.instance_type
            )
            self._prior_cache[offer.key] = found
        return found

    def candidates(self, resources: ResourcesSpec) -> Candidates:
        key = requirement(resources)
        found = self._cache.get(key)
        if found is None:
            found = self._build(key)
            self._cache[key] = found
        return found

    def _build(self, key: Requirement) -> Candidates:
        nodes = key[3]
        matching = [o for o in self._offers if matches(o, key)]
        on_demand = sorted(
            (o for o in matching if o.on_demand_price is not None),
            key=lambda o: (o.on_demand_price, o.key),
        )
        spot = []
        for o in matching:
            if o.spot_price is None:
                continue
            prior = self.prior(o)
            loss = prior.rate * nodes * self._restart  # share of billed time spent restarting
            effective = o.spot_price / (1.0 - loss) if loss < 0.9 else math.inf
            spot.append(SpotCandidate(o, prior, effective))
        spot.sort(key=lambda c: (c.effective_price, c.offer.key))
        by_slot: dict[tuple[str, str], Offer] = {}
        for o in matching:
            by_slot.setdefault((o.zone, o.instance_type), o)
        return Candidates(tuple(on_demand), tuple(spot), by_slot, bool(matching))

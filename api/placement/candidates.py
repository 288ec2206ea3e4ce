"""Candidate offers per requirement: sorted once per shape (GPU model and count, nodes) per
decide() call and filtered lazily by the rest, so 10,000 distinct requirements cost a few dozen
sorts and, per job, the comparisons up to its first usable option."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from api.pricing.gpu_speed import Speeds, speed_of
from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors
from api.pricing.requirements import RULES, Requirement, requirement
from gpujobs.spec import ResourcesSpec


@dataclass(frozen=True, slots=True)
class SpotCandidate:
    offer: Offer
    prior: PreemptionPrior
    effective_price: float  # per node-hour of progress, after expected preemption losses


class Candidates:
    """The offers matching one requirement, in the order placement wants them. The lists are
    the shape's (GPU model and count, nodes), sorted once per snapshot and filtered lazily by
    the rest of the requirement, so a job that takes the first usable option costs a few
    comparisons however many distinct requirements there are."""

    __slots__ = ("_key", "_on_demand", "_spot", "_all", "_slots")

    def __init__(
        self,
        key: Requirement,
        on_demand: Sequence[Offer],
        spot: Sequence[SpotCandidate],
        every: Sequence[Offer],
        slots: Mapping[tuple[str, str], Sequence[Offer]],
    ) -> None:
        self._key = key
        self._on_demand = on_demand
        self._spot = spot
        self._all = every
        self._slots = slots

    def iter_on_demand(self) -> Iterator[Offer]:
        """Cheapest first."""
        return (o for o in self._on_demand if _rest(o, self._key))

    def iter_spot(self) -> Iterator[SpotCandidate]:
        """Cheapest expected cost first."""
        return (c for c in self._spot if _rest(c.offer, self._key))

    @property
    def on_demand(self) -> tuple[Offer, ...]:
        return tuple(self.iter_on_demand())

    @property
    def spot(self) -> tuple[SpotCandidate, ...]:
        return tuple(self.iter_spot())

    @property
    def any_offer(self) -> bool:
        return any(_rest(o, self._key) for o in self._all)

    def at(self, zone: str, instance_type: str) -> Offer | None:
        """The matching offer of a reservation's place, if any."""
        return next(
            (o for o in self._slots.get((zone, instance_type), ()) if _rest(o, self._key)), None
        )


_MEMORY = RULES["min_gpu_memory_gb"]
_WHERE = (RULES["clouds"], RULES["regions"])


def _rest(o: Offer, key: Requirement) -> bool:
    """The requirement's one rule beyond the lists' shape: GPU memory (the most varied)."""
    return key[1] is None or _MEMORY(o, key)


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
        speeds: Speeds | None = None,
    ) -> None:
        self._offers = offers
        self._speeds = speeds or {}
        self._priors = priors
        self._rates = rates
        self._restart = restart_hours
        self._cache: dict[Requirement, Candidates] = {}
        self._shapes: dict[
            tuple[tuple[str, ...] | None, int, int],
            tuple[tuple[Offer, ...], tuple[SpotCandidate, ...], tuple[Offer, ...]],
        ] = {}
        self._by_count: dict[int, list[Offer]] = {}
        self._by_model: dict[tuple[int, str], list[Offer]] = {}
        # id(narrowed list) -> (the list, kept alive so its id stays its own; its slots)
        self._slot_cache: dict[
            int, tuple[tuple[Offer, ...], dict[tuple[str, str], list[Offer]]]
        ] = {}
        self._places: dict[
            tuple[tuple[str, ...] | None, int, int, tuple[str, ...] | None, tuple[str, ...] | None],
            tuple[tuple[Offer, ...], tuple[SpotCandidate, ...], tuple[Offer, ...]],
        ] = {}
        self._prior_cache: dict[str, PreemptionPrior] = {}

    def prior(self, offer: Offer) -> PreemptionPrior:
        found = self._prior_cache.get(offer.key)
        if found is None:
            found = self._rates.get((offer.zone, offer.instance_type)) or self._priors.lookup(
                zone=offer.zone,
                region=offer.region,
                instance_type=offer.instance_type,
                cloud=offer.cloud,
            )
            self._prior_cache[offer.key] = found
        return found

    def gang_rate(self, rate: float, nodes: int) -> float:
        return self._priors.gang_rate(rate, nodes)

    def candidates(self, resources: ResourcesSpec) -> Candidates:
        key = requirement(resources)
        found = self._cache.get(key)
        if found is None:
            models, _, gpus, nodes, clouds, regions = key
            assert gpus is not None  # a job's resources always name it
            on_demand, spot, every = self._place(models, gpus, nodes, clouds, regions)
            found = Candidates(key, on_demand, spot, every, self._slots_of(every))
            self._cache[key] = found
        return found

    def _slots_of(self, every: tuple[Offer, ...]) -> Mapping[tuple[str, str], Sequence[Offer]]:
        found = self._slot_cache.get(id(every))
        if found is None:
            slots: dict[tuple[str, str], list[Offer]] = {}
            for o in every:
                slots.setdefault((o.zone, o.instance_type), []).append(o)
            found = (every, slots)
            self._slot_cache[id(every)] = found
        return found[1]

    def _place(
        self,
        models: tuple[str, ...] | None,
        gpus: int,
        nodes: int,
        clouds: tuple[str, ...] | None,
        regions: tuple[str, ...] | None,
    ) -> tuple[tuple[Offer, ...], tuple[SpotCandidate, ...], tuple[Offer, ...]]:
        """The shape's sorted lists narrowed to the clouds and regions asked for (order kept)."""
        key = (models, gpus, nodes, clouds, regions)
        found = self._places.get(key)
        if found is not None:
            return found
        on_demand, spot, every = self._shape(models, gpus, nodes)
        if clouds is not None or regions is not None:
            need: Requirement = (models, None, gpus, nodes, clouds, regions)

            def keep(o: Offer) -> bool:
                return all(rule(o, need) for rule in _WHERE)

            on_demand = tuple(o for o in on_demand if keep(o))
            spot = tuple(c for c in spot if keep(c.offer))
            every = tuple(o for o in every if keep(o))
        found = (on_demand, spot, every)
        self._places[key] = found
        return found

    def _shape(
        self, models: tuple[str, ...] | None, gpus: int, nodes: int
    ) -> tuple[tuple[Offer, ...], tuple[SpotCandidate, ...], tuple[Offer, ...]]:
        """Offers of one shape, sorted once: on-demand by price, spot by expected cost, both per
        hour of work (a GPU twice as fast does the work in half the hours)."""
        key = (models, gpus, nodes)
        found = self._shapes.get(key)
        if found is not None:
            return found
        if not self._by_count:
            for o in self._offers:
                self._by_count.setdefault(o.gpu_count, []).append(o)
                self._by_model.setdefault((o.gpu_count, o.gpu_model.lower()), []).append(o)
        if models is None:
            matching = list(self._by_count.get(gpus, ()))
        else:
            matching = [o for m in models for o in self._by_model.get((gpus, m), ())]
        keys = {id(o): o.key for o in matching}
        speeds = {id(o): speed_of(self._speeds, o.gpu_model) for o in matching}
        on_demand = sorted(
            (o for o in matching if o.on_demand_price is not None),
            key=lambda o: ((o.on_demand_price or 0.0) / speeds[id(o)], keys[id(o)]),
        )
        spot = []
        for o in matching:
            if o.spot_price is None:
                continue
            prior = self.prior(o)
            # share of billed time spent restarting; a gang's nodes are preempted together
            loss = self._priors.gang_rate(prior.rate, nodes) * self._restart
            effective = o.spot_price / (1.0 - loss) if loss < 0.9 else math.inf
            spot.append(SpotCandidate(o, prior, effective))
        spot.sort(key=lambda c: (c.effective_price / speeds[id(c.offer)], keys[id(c.offer)]))
        found = (tuple(on_demand), tuple(spot), tuple(matching))
        self._shapes[key] = found
        return found

"""Can any capacity run this spec at all? Pure rules over the catalog, each failure a 422 that
names the field to change: no offer matches the resources, none is sold on the allowed capacity
types, or all cost more than `max_price_per_hour`. Capacity that is only busy (no spot capacity
now, a full reservation) is not a reason to refuse: the scheduler waits for it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from api.errors import InvalidRequest
from api.pricing.catalog import Catalog
from api.pricing.offers import Offer
from api.pricing.requirements import FILTERS, Requirement, requirement
from gpujobs.resources import FieldError
from gpujobs.spec import CapacityType, JobSpec, ResourcesSpec


@dataclass(frozen=True, slots=True)
class Slot:
    """A reservation's place: (zone, instance type) and how many nodes it holds."""

    zone: str
    instance_type: str
    count: int


def _listing(values: set[str]) -> str:
    ordered = sorted(values)
    return ", ".join(ordered[:16]) + (", ..." if len(ordered) > 16 else "")


def _explain(field: str, before: list[Offer], r: ResourcesSpec) -> str:
    if field == "gpu_models":
        return f"no offer has GPU model {_listing(set(r.gpu_models or []))}; the catalog has " + (
            _listing({o.gpu_model for o in before})
        )
    if field == "min_gpu_memory_gb":
        most = max((o.gpu_memory_gb or 0.0) for o in before)
        return f"no matching GPU has {r.min_gpu_memory_gb:g} GiB; the largest has {most:g} GiB"
    if field == "gpus_per_node":
        counts = ", ".join(str(c) for c in sorted({o.gpu_count for o in before}))
        return f"no matching instance has {r.gpus_per_node} GPUs per node; they have {counts}"
    if field == "clouds":
        return f"no matching offer on {_listing(set(r.clouds or []))}; they are on " + (
            _listing({o.cloud for o in before})
        )
    return f"no matching offer in {_listing(set(r.regions or []))}; they are in " + (
        _listing({o.region for o in before})
    )


def _invalid(field: str, reason: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {reason}", fields=[FieldError(field=field, reason=reason)])


# (catalog id, requirement) -> (catalog, offers): submit is a hot path and most specs repeat a
# few requirements. The catalog is kept in the value so its id cannot be reused while cached.
_MATCHED: dict[tuple[int, Requirement], tuple[Catalog, tuple[Offer, ...]]] = {}
_MATCHED_MAX = 256


def matching_offers(resources: ResourcesSpec, catalog: Catalog) -> tuple[Offer, ...]:
    """Offers with the requested resources; a 422 naming the first requirement nothing meets."""
    need = requirement(resources)
    key = (id(catalog), need)
    cached = _MATCHED.get(key)
    if cached is not None:
        return cached[1]
    found = list(catalog.offers)
    for name, keep in FILTERS:
        narrowed = [o for o in found if keep(o, need)]
        if not narrowed:
            raise _invalid(f"resources.{name}", _explain(name, found, resources))
        found = narrowed
    if len(_MATCHED) >= _MATCHED_MAX:
        _MATCHED.clear()
    _MATCHED[key] = (catalog, tuple(found))
    return tuple(found)


def _sold(offers: Sequence[Offer], allowed: set[CapacityType]) -> bool:
    spot, on_demand = CapacityType.SPOT in allowed, CapacityType.ON_DEMAND in allowed
    return any(
        (on_demand and o.on_demand_price is not None) or (spot and o.spot_price is not None)
        for o in offers
    )


def check(
    spec: JobSpec, catalog: Catalog, *, slots: Callable[[], Sequence[Slot]]
) -> tuple[Offer, ...]:
    """Refuse a spec no capacity could ever run; returns the offers matching its resources.

    `slots` (reservations in force or upcoming) is read only when reserved capacity decides."""
    offers = matching_offers(spec.resources, catalog)
    allowed = set(spec.capacity.types)
    nodes = spec.resources.nodes
    cap = spec.capacity.max_price_per_hour
    if cap is None and _sold(offers, allowed):
        return offers  # the common case, on every submit: no price cap, something is for sale
    priced = [
        (price * nodes, o)
        for o in offers
        for capacity, price in (
            (CapacityType.ON_DEMAND, o.on_demand_price),
            (CapacityType.SPOT, o.spot_price),
        )
        if capacity in allowed and price is not None
    ]
    if any(cap is None or price <= cap + 1e-9 for price, _ in priced):
        return offers
    if CapacityType.RESERVED in allowed and _reservable(offers, slots(), nodes):
        return offers
    if not priced:
        sold_as = " or ".join(str(c) for c in spec.capacity.types)
        extra = " and no reservation holds it" if CapacityType.RESERVED in allowed else ""
        raise _invalid("capacity.types", f"no matching offer is sold as {sold_as}{extra}")
    price, offer = min(priced, key=lambda p: (p[0], p[1].key))
    raise _invalid(
        "capacity.max_price_per_hour",
        f"${cap:.2f}/h is below the cheapest matching offer: ${price:.2f}/h for {nodes} x "
        f"{offer.instance_type} in {offer.zone}",
    )


def _reservable(offers: Sequence[Offer], slots: Sequence[Slot], nodes: int) -> bool:
    places = {(o.zone, o.instance_type) for o in offers}
    return any((s.zone, s.instance_type) in places and s.count >= nodes for s in slots)

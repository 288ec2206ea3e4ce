"""Catalog queries: the shipped offers, filtered and ranked cheapest first."""

from __future__ import annotations

from api.catalog import views
from api.errors import InvalidRequest
from api.pricing.catalog import Catalog, default_catalog, find_offers
from gpujobs.plans import OfferList
from gpujobs.resources import FieldError
from gpujobs.spec import CapacityType


def _known(field: str, wanted: list[str], values: set[str]) -> None:
    """A name the catalog does not have is a typo to report, not an empty answer."""
    lowered = {v.lower() for v in values}
    unknown = [w for w in wanted if w.lower() not in lowered]
    if unknown:
        ordered = sorted(values)
        shown = ", ".join(ordered[:20]) + (", ..." if len(ordered) > 20 else "")
        reason = f"{unknown[0]!r} is not in the catalog; it has {shown}"
        raise InvalidRequest(f"{field}: {reason}", fields=[FieldError(field=field, reason=reason)])


def offers(
    *,
    gpu_models: list[str],
    min_gpu_memory_gb: float | None,
    gpu_count: int | None,
    regions: list[str],
    clouds: list[str],
    capacity: CapacityType | None,
    limit: int,
    catalog: Catalog | None = None,
) -> OfferList:
    """Offers matching every filter (a list filter matches any of its values, ignoring case),
    cheapest first on `capacity` (on-demand when unset or reserved: reservations are priced by
    their own pool, see /v1/admin/reservations)."""
    catalog = catalog or default_catalog()
    _known("gpu_model", gpu_models, {o.gpu_model for o in catalog.offers})
    _known("region", regions, {o.region for o in catalog.offers})
    _known("cloud", clouds, {o.cloud for o in catalog.offers})
    found = find_offers(
        catalog,
        gpu_model=gpu_models or None,
        min_gpu_memory_gb=min_gpu_memory_gb,
        gpu_count=gpu_count,
        region=regions or None,
        cloud=clouds or None,
        capacity=capacity,
    )
    return OfferList(items=[views.offer(o) for o in found[:limit]], total=len(found))

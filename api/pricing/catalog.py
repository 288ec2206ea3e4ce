"""The shipped price catalog: loading (tolerant of odd rows), caching and filtering."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from api.pricing.offers import Offer
from api.pricing.requirements import Requirement, matches
from gpujobs.spec import CapacityType

DATA_DIR = Path(__file__).parent / "data"
CATALOG_FILE = DATA_DIR / "offers.csv"
COLUMNS = (
    "cloud",
    "region",
    "zone",
    "instance_type",
    "gpu_model",
    "gpu_count",
    "gpu_memory_gb",
    "vcpus",
    "ram_gb",
    "on_demand_price",
    "spot_price",
    "host_estimated",
)


@dataclass(frozen=True, slots=True)
class Catalog:
    offers: tuple[Offer, ...]
    skipped: int = 0  # source rows that could not be used (no price, unparseable)

    def by_key(self) -> dict[str, Offer]:
        return {offer.key: offer for offer in self.offers}


def _number(text: str | None) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _positive(text: str | None) -> float | None:
    value = _number(text)
    return value if value is not None and value > 0 else None


def clean_offers(offers: Iterable[Offer]) -> list[Offer]:
    """Apply the catalog's rules to candidate offers.

    - spot at or above on-demand is dropped (never the cheaper choice; such quotes are stale);
    - an offer with neither price is dropped;
    - duplicate rows of one offer (e.g. the two p4de rows per zone that differ only in GpuInfo)
      merge into one keeping the cheapest price of each kind and the known GPU memory.
    """
    merged: dict[str, Offer] = {}
    for offer in offers:
        spot = offer.spot_price
        if spot is not None and offer.on_demand_price is not None and spot >= offer.on_demand_price:
            spot = None
        if spot is None and offer.on_demand_price is None:
            continue
        offer = replace(offer, spot_price=spot)
        seen = merged.get(offer.key)
        if seen is not None:
            offer = replace(
                seen,
                on_demand_price=_cheapest(seen.on_demand_price, offer.on_demand_price),
                spot_price=_cheapest(seen.spot_price, offer.spot_price),
                gpu_memory_gb=seen.gpu_memory_gb or offer.gpu_memory_gb,
            )
            if (
                offer.spot_price is not None
                and offer.on_demand_price is not None
                and offer.spot_price >= offer.on_demand_price
            ):
                offer = replace(offer, spot_price=None)
        merged[offer.key] = offer
    return sorted(merged.values(), key=lambda o: o.key)


def _cheapest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def parse_catalog(text: str) -> Catalog:
    """Parse the normalized CSV (lines starting with `#` are provenance comments)."""
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    candidates: list[Offer] = []
    skipped = 0
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        offer = _row_offer(row)
        if offer is None:
            skipped += 1
        else:
            candidates.append(offer)
    offers = clean_offers(candidates)
    return Catalog(tuple(offers), skipped + len(candidates) - len(offers))


def _row_offer(row: Mapping[str, str | None]) -> Offer | None:
    count = _positive(row.get("gpu_count"))
    names = [row.get(c) for c in ("cloud", "region", "zone", "instance_type", "gpu_model")]
    if count is None or not all(n and n.strip() for n in names):
        return None
    cloud, region, zone, instance_type, gpu_model = (str(n).strip() for n in names)
    return Offer(
        cloud=cloud,
        region=region,
        zone=zone,
        instance_type=instance_type,
        gpu_model=gpu_model,
        gpu_count=int(count),
        gpu_memory_gb=_positive(row.get("gpu_memory_gb")),
        vcpus=_positive(row.get("vcpus")),
        ram_gb=_positive(row.get("ram_gb")),
        on_demand_price=_positive(row.get("on_demand_price")),
        spot_price=_positive(row.get("spot_price")),
        host_estimated=(row.get("host_estimated") or "").strip().lower() in {"1", "true"},
    )


def load_catalog(path: Path = CATALOG_FILE) -> Catalog:
    return parse_catalog(path.read_text())


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The shipped catalog, read once per process."""
    return load_catalog()


def find_offers(
    catalog: Catalog,
    *,
    gpu_model: str | Iterable[str] | None = None,
    min_gpu_memory_gb: float | None = None,
    gpu_count: int | None = None,
    region: str | Iterable[str] | None = None,
    cloud: str | Iterable[str] | None = None,
    capacity: CapacityType | None = None,
) -> list[Offer]:
    """Offers matching every given filter, cheapest first.

    GPU model match is case-insensitive and exact (`A100` does not match `A100-80GB`);
    memory is per GPU. With `capacity`, only offers priced on it are returned and sorted by that
    price; otherwise by on-demand price (spot-only offers last).
    """
    capacity = None if capacity is None else CapacityType(capacity)
    need: Requirement = (
        _lower_tuple(gpu_model),
        min_gpu_memory_gb,
        gpu_count,
        1,
        _lower_tuple(cloud),
        _lower_tuple(region),
    )
    found = [
        o
        for o in catalog.offers
        if matches(o, need)
        and (capacity in (None, CapacityType.RESERVED) or o.price(capacity) is not None)
    ]
    price_of = CapacityType.ON_DEMAND if capacity in (None, CapacityType.RESERVED) else capacity

    def sort_key(o: Offer) -> tuple[float, str]:
        p = o.price(price_of)
        return (math.inf if p is None else p, o.key)

    return sorted(found, key=sort_key)


def _lower_tuple(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value.lower(),)
    return tuple(sorted(v.lower() for v in value))

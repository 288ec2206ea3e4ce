"""Catalog offers -> the contract's CatalogOffer."""

from __future__ import annotations

from api.pricing.offers import Offer
from gpujobs.plans import CatalogOffer


def offer(o: Offer) -> CatalogOffer:
    return CatalogOffer(
        key=o.key,
        cloud=o.cloud,
        region=o.region,
        zone=o.zone,
        instance_type=o.instance_type,
        gpu_model=o.gpu_model,
        gpu_count=o.gpu_count,
        gpu_memory_gb=o.gpu_memory_gb,
        vcpus=o.vcpus,
        ram_gb=o.ram_gb,
        on_demand_price=o.on_demand_price,
        spot_price=o.spot_price,
        host_estimated=o.host_estimated,
    )

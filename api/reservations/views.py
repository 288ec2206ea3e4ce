"""Reservation rows -> the contract's Reservation."""

from __future__ import annotations

from api.models import Reservation
from gpujobs import plans


def reservation(row: Reservation, *, in_use: int) -> plans.Reservation:
    return plans.Reservation(
        id=row.id,
        cloud=row.cloud,
        region=row.region,
        zone=row.zone,
        instance_type=row.instance_type,
        count=row.count,
        in_use=in_use,
        price_per_hour=row.price_per_hour,
        starts_at=row.starts_at,
        ends_at=row.ends_at,
        created_at=row.created_at,
    )

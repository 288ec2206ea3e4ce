"""Live capacity facts the catalog does not hold: offers that answered "no capacity" lately."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import CapacityOutage
from gpujobs.spec import CapacityType

Unavailable = frozenset[tuple[str, str, CapacityType]]


def no_capacity(session: Session, *, now: datetime) -> Unavailable:
    """(zone, instance type, capacity type) out until after `now`: the `unavailable` set of
    api.placement's Snapshot and estimate()."""
    rows = session.execute(
        select(
            CapacityOutage.zone, CapacityOutage.instance_type, CapacityOutage.capacity_type
        ).where(CapacityOutage.until > now)
    )
    return frozenset((zone, kind, CapacityType(capacity)) for zone, kind, capacity in rows)


def mark_outage(
    session: Session,
    *,
    zone: str,
    instance_type: str,
    capacity_type: CapacityType,
    until: datetime,
    reason: str | None,
) -> None:
    row = session.get(CapacityOutage, (zone, instance_type, capacity_type.value))
    if row is None:
        session.add(
            CapacityOutage(
                zone=zone,
                instance_type=instance_type,
                capacity_type=capacity_type.value,
                until=until,
                reason=reason,
            )
        )
    else:
        row.until = max(row.until, until)
        row.reason = reason

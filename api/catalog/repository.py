"""Live capacity facts the catalog does not hold: zones where spot has no capacity now."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import SpotObservation
from gpujobs.spec import CapacityType

Unavailable = frozenset[tuple[str, str, CapacityType]]


def no_capacity(session: Session, *, now: datetime) -> Unavailable:
    """(zone, instance type, SPOT) for every slot whose spot capacity is out until after `now`:
    the `unavailable` set of api.placement's Snapshot and estimate()."""
    rows = session.execute(
        select(SpotObservation.zone, SpotObservation.instance_type).where(
            SpotObservation.no_capacity_until > now
        )
    )
    return frozenset((zone, instance_type, CapacityType.SPOT) for zone, instance_type in rows)

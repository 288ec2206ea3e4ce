"""Plans for a spec from the placement cost model; a spec without a work estimate is a 422."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from api.errors import InvalidRequest
from api.placement import Plan, Reservation, estimate
from api.pricing.catalog import Catalog
from api.pricing.preemption import Priors
from gpujobs.resources import FieldError
from gpujobs.spec import CapacityType, JobSpec

ALL = 1_000_000


def plans(
    spec: JobSpec,
    *,
    catalog: Catalog,
    priors: Priors,
    now: datetime,
    reservations: Sequence[Reservation] = (),
    unavailable: frozenset[tuple[str, str, CapacityType]] = frozenset(),
    limit: int = ALL,
) -> list[Plan]:
    """Ranked plans (see api.placement.estimate); a spec without `estimated_hours` is a 422."""
    if spec.estimated_hours is None:
        reason = "needed to estimate cost and finish time (uninterrupted hours on the resources)"
        raise InvalidRequest(
            f"estimated_hours: {reason}",
            fields=[FieldError(field="estimated_hours", reason=reason)],
        )
    return estimate(
        spec,
        catalog,
        priors,
        now,
        reservations=reservations,
        unavailable=unavailable,
        limit=limit,
    )

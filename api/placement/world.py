"""The snapshot decide() sees, from the database: one builder for the scheduler, the estimate
and admission, so that all three weigh the same learned rates, restart time, reservations,
budgets and capacity known gone."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from api.catalog.repository import no_capacity
from api.models import SpotObservation
from api.placement import repository
from api.placement.snapshot import JobState, Reservation, Snapshot
from api.pricing.catalog import Catalog
from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors, posterior_rate
from api.reservations.repository import with_usage
from gpujobs.spec import CapacityType

Unavailable = frozenset[tuple[str, str, CapacityType]]


def learned_rates(
    observations: Iterable[SpotObservation], *, priors: Priors, regions: Mapping[str, str]
) -> dict[tuple[str, str], PreemptionPrior]:
    """Per (zone, instance type): the prior updated with what this service has seen."""
    rates = {}
    for row in observations:
        if row.preemptions == 0 and row.spot_seconds <= 0:
            continue
        prior = priors.lookup(
            zone=row.zone, region=regions.get(row.zone, ""), instance_type=row.instance_type
        )
        rates[(row.zone, row.instance_type)] = posterior_rate(
            prior, row.preemptions, row.spot_seconds / 3600.0
        )
    return rates


def unavailable(
    outages: Unavailable, *, offers: Iterable[Offer], spot_available: bool | None
) -> Unavailable:
    """Capacity known to be gone: recent no-capacity answers, or the launcher's own spot market."""
    if spot_available is False:
        return outages | {
            (o.zone, o.instance_type, CapacityType.SPOT) for o in offers if o.spot_price
        }
    return outages


def build(
    *,
    now: datetime,
    jobs: Sequence[JobState],
    catalog: Catalog,
    priors: Priors,
    observations: Iterable[SpotObservation],
    outages: Unavailable,
    reservations: Sequence[Reservation],
    budgets: Mapping[str, float | None],
    spot_available: bool | None,
    restart_hours: float,
    step_hours: float,
) -> Snapshot:
    regions = {offer.zone: offer.region for offer in catalog.offers}
    return Snapshot(
        now=now,
        jobs=jobs,
        offers=catalog.offers,
        unavailable=unavailable(outages, offers=catalog.offers, spot_available=spot_available),
        reservations=reservations,
        budgets=budgets,
        priors=priors,
        rates=learned_rates(observations, priors=priors, regions=regions),
        restart_hours=restart_hours,
        step_hours=step_hours,
    )


def snapshot(
    session: Session,
    *,
    now: datetime,
    jobs: Sequence[JobState],
    catalog: Catalog,
    priors: Priors,
    budgets: Mapping[str, float | None],
    restart_hours: float,
    step_hours: float,
    spot_available: bool | None = None,
    reservations: Sequence[Reservation] | None = None,
) -> Snapshot:
    """The scheduler's view of the world now, read from the database."""
    return build(
        now=now,
        jobs=jobs,
        catalog=catalog,
        priors=priors,
        observations=repository.spot_observations(session),
        outages=no_capacity(session, now=now),
        reservations=with_usage(session, now=now) if reservations is None else reservations,
        budgets=budgets,
        spot_available=spot_available,
        restart_hours=restart_hours,
        step_hours=step_hours,
    )

"""The snapshot decide() sees, from the database: one builder for the scheduler, the estimate
and admission, so that all three weigh the same learned rates, restart time, reservations,
budgets and capacity known gone."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from api.catalog.repository import no_capacity
from api.placement import repository
from api.placement.learning import PoolHistory, pool_history
from api.placement.snapshot import JobState, Reservation, Snapshot
from api.pricing.catalog import Catalog
from api.pricing.gpu_speed import normalized
from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors
from api.reservations import repository as reservation_rows
from gpujobs.spec import CapacityType

Unavailable = frozenset[tuple[str, str, CapacityType]]


Histories = Mapping[tuple[str, str], PoolHistory]
# What the service saw of a pool longer ago than this says little about it now: a pool's
# preemption rate and availability drift over days (in the traces, us-west-2c's p3.2xlarge kept
# spot 6.8 h on average through February 2023, 2.7 h over all its records), so the prior plus
# the last week decides.
OBSERVATION_WINDOW = timedelta(days=7)


def learned_rates(
    histories: Histories,
    *,
    priors: Priors,
    regions: Mapping[str, str],
    clouds: Mapping[str, str] | None = None,
) -> dict[tuple[str, str], PreemptionPrior]:
    """Per spot pool (zone, instance type): its hierarchical prior updated with what this
    service saw of it (learning.py): preemptions per spot-hour and outages."""
    clouds = clouds or {}
    rates = {}
    for (zone, instance_type), seen in histories.items():
        if seen.empty:
            continue
        prior = priors.lookup(
            zone=zone,
            region=regions.get(zone, ""),
            instance_type=instance_type,
            cloud=clouds.get(zone, ""),
        )
        rates[(zone, instance_type)] = seen.posterior(prior)
    return rates


def pool_histories(session: Session, *, now: datetime) -> dict[tuple[str, str], PoolHistory]:
    """Every spot pool's history over the observation window, from its attempts."""
    since = now - OBSERVATION_WINDOW
    return {
        pool: pool_history(attempts, since=since, now=now)
        for pool, attempts in repository.spot_attempts(session, since=since).items()
    }


def with_usage(session: Session, *, now: datetime) -> list[Reservation]:
    """The reservations in force at `now` as decide() sees them, with the nodes in use."""
    used = reservation_rows.in_use(session)
    return [
        Reservation(
            id=row.id,
            instance_type=row.instance_type,
            zone=row.zone,
            count=row.count,
            in_use=used.get(row.id, 0),
            price_per_hour=row.price_per_hour,
        )
        for row in reservation_rows.active(session, now=now)
    ]


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
    histories: Histories,
    outages: Unavailable,
    reservations: Sequence[Reservation],
    budgets: Mapping[str, float | None],
    spot_available: bool | None,
    restart_hours: float,
    step_hours: float,
    gpu_speeds: Mapping[str, float] | None = None,
) -> Snapshot:
    regions = {offer.zone: offer.region for offer in catalog.offers}
    clouds = {offer.zone: offer.cloud for offer in catalog.offers}
    return Snapshot(
        now=now,
        jobs=jobs,
        offers=catalog.offers,
        unavailable=unavailable(outages, offers=catalog.offers, spot_available=spot_available),
        reservations=reservations,
        budgets=budgets,
        priors=priors,
        rates=learned_rates(histories, priors=priors, regions=regions, clouds=clouds),
        restart_hours=restart_hours,
        step_hours=step_hours,
        gpu_speeds=normalized(gpu_speeds),
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
    gpu_speeds: Mapping[str, float] | None = None,
) -> Snapshot:
    """The scheduler's view of the world now, read from the database."""
    return build(
        now=now,
        jobs=jobs,
        catalog=catalog,
        priors=priors,
        histories=pool_histories(session, now=now),
        outages=no_capacity(session, now=now),
        reservations=with_usage(session, now=now) if reservations is None else reservations,
        budgets=budgets,
        spot_available=spot_available,
        restart_hours=restart_hours,
        step_hours=step_hours,
        gpu_speeds=gpu_speeds,
    )

"""Reservation use cases (admin only): register, list and remove prepaid capacity."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import InvalidRequest, NotFound
from api.models import Reservation
from api.pricing.catalog import Catalog, default_catalog
from api.pricing.offers import Offer
from api.reservations import repository, views
from gpujobs import plans
from gpujobs.resources import FieldError


def _require_admin(principal: Principal) -> None:
    principal.require_team_token()
    principal.require_admin()


def _invalid(field: str, reason: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {reason}", fields=[FieldError(field=field, reason=reason)])


def catalog_offer(body: plans.ReservationCreate, catalog: Catalog) -> Offer:
    """The catalog offer the reservation is for; a 422 naming the field that does not match."""
    cloud = body.cloud.lower()
    same_type = [
        o
        for o in catalog.offers
        if o.cloud.lower() == cloud and o.instance_type.lower() == body.instance_type.lower()
    ]
    if not same_type:
        raise _invalid("instance_type", f"{body.instance_type!r} is not in the {cloud} catalog")
    in_zone = [o for o in same_type if o.zone.lower() == body.zone.lower()]
    if not in_zone:
        zones = sorted({o.zone for o in same_type})
        shown = ", ".join(zones[:10]) + (", ..." if len(zones) > 10 else "")
        raise _invalid("zone", f"{body.instance_type} is not sold in zone {body.zone!r}: {shown}")
    offer = in_zone[0]
    if offer.region.lower() != body.region.lower():
        raise _invalid("region", f"zone {offer.zone} is in region {offer.region}")
    return offer


def create(
    session: Session,
    *,
    principal: Principal,
    body: plans.ReservationCreate,
    catalog: Catalog | None = None,
) -> plans.Reservation:
    _require_admin(principal)
    offer = catalog_offer(body, catalog or default_catalog())
    row = repository.add(
        session,
        Reservation(
            cloud=offer.cloud,
            region=offer.region,
            zone=offer.zone,
            instance_type=offer.instance_type,
            count=body.count,
            price_per_hour=body.price_per_hour,
            starts_at=body.starts_at,
            ends_at=body.ends_at,
        ),
    )
    return views.reservation(row, in_use=0)


def list_reservations(session: Session, *, principal: Principal) -> list[plans.Reservation]:
    _require_admin(principal)
    used = repository.in_use(session)
    return [
        views.reservation(row, in_use=used.get(row.id, 0)) for row in repository.list_all(session)
    ]


def delete(session: Session, *, principal: Principal, reservation_id: str) -> None:
    """Remove a reservation; attempts running on it keep running, no longer linked to it."""
    _require_admin(principal)
    row = repository.get(session, reservation_id=reservation_id)
    if row is None:
        raise NotFound(f"reservation {reservation_id} not found")
    repository.delete(session, row)

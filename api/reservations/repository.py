"""Every query about reservations and how many of their nodes are in use (`in_use`: held by
attempts whose `ended_at` is NULL); api.placement.world makes the scheduler's view of them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from api.models import JobAttempt, Reservation


def in_use(session: Session) -> dict[str, int]:
    """Reservation id -> nodes held by attempts that have not ended."""
    rows = session.execute(
        select(JobAttempt.reservation_id, func.sum(JobAttempt.nodes))
        .where(JobAttempt.reservation_id.is_not(None), JobAttempt.ended_at.is_(None))
        .group_by(JobAttempt.reservation_id)
    )
    return {str(reservation_id): int(nodes or 0) for reservation_id, nodes in rows}


def active(session: Session, *, now: datetime, upcoming: bool = False) -> list[Reservation]:
    """Reservations in force at `now` (with `upcoming`, also those that start later)."""
    query = select(Reservation).where(or_(Reservation.ends_at.is_(None), Reservation.ends_at > now))
    if not upcoming:
        query = query.where(or_(Reservation.starts_at.is_(None), Reservation.starts_at <= now))
    return list(session.scalars(query.order_by(Reservation.id)))


def list_all(session: Session) -> list[Reservation]:
    return list(session.scalars(select(Reservation).order_by(Reservation.id)))


def get(session: Session, *, reservation_id: str) -> Reservation | None:
    return session.get(Reservation, reservation_id)


def add(session: Session, reservation: Reservation) -> Reservation:
    session.add(reservation)
    session.flush()
    return reservation


def delete(session: Session, reservation: Reservation) -> None:
    session.delete(reservation)
    session.flush()

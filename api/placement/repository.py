"""Queries placement needs that no other repository answers: what the service observed of spot."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from api.models import JobAttempt, SpotObservation


def spot_observations(session: Session) -> list[SpotObservation]:
    return list(session.scalars(select(SpotObservation)))


def spot_launches(session: Session, *, since: datetime) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (zone, instance type): spot launches since `since` that started and that found no
    capacity, in one grouped query over the attempts (availability as launches reveal it)."""
    started = func.sum(case((JobAttempt.started_at.is_not(None), 1), else_=0))
    refused = func.sum(case((JobAttempt.end_reason == "no_capacity", 1), else_=0))
    rows = session.execute(
        select(JobAttempt.zone, JobAttempt.instance_type, started, refused)
        .where(JobAttempt.capacity_type == "spot", JobAttempt.created_at >= since)
        .group_by(JobAttempt.zone, JobAttempt.instance_type)
    )
    return {(zone, kind): (int(ok or 0), int(no or 0)) for zone, kind, ok, no in rows}

"""Queries placement needs that no other repository answers: what the service observed of spot."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from api.models import JobAttempt


def spot_exposure(
    session: Session, *, since: datetime, now: datetime
) -> dict[tuple[str, str], tuple[int, float]]:
    """Per (zone, instance type): spot preemptions since `since` and the spot hours run within
    [since, now] (an attempt still running counts up to now), from the attempts themselves, so
    a pass that closes an attempt twice cannot count it twice."""
    rows = session.execute(
        select(
            JobAttempt.zone,
            JobAttempt.instance_type,
            JobAttempt.started_at,
            JobAttempt.ended_at,
            JobAttempt.end_reason,
        ).where(
            JobAttempt.capacity_type == "spot",
            JobAttempt.started_at.is_not(None),
            or_(JobAttempt.ended_at.is_(None), JobAttempt.ended_at >= since),
        )
    )
    seen: dict[tuple[str, str], tuple[int, float]] = {}
    for zone, kind, started, ended, reason in rows:
        begin, end = max(started, since), min(ended or now, now)
        hours = max(0.0, (end - begin).total_seconds() / 3600.0)
        preemptions, total = seen.get((zone, kind), (0, 0.0))
        seen[(zone, kind)] = (preemptions + (reason == "preempted"), total + hours)
    return seen


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

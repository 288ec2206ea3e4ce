"""Queries placement needs that no other repository answers: what the service observed of spot."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.models import JobAttempt
from api.placement.learning import SpotAttempt


def spot_attempts(session: Session, *, since: datetime) -> dict[tuple[str, str], list[SpotAttempt]]:
    """Per (zone, instance type): the spot attempts asked for since `since` or still open then,
    in one query (what the service saw of each pool: learning.pool_history)."""
    rows = session.execute(
        select(
            JobAttempt.zone,
            JobAttempt.instance_type,
            JobAttempt.created_at,
            JobAttempt.started_at,
            JobAttempt.ended_at,
            JobAttempt.end_reason,
        ).where(
            JobAttempt.capacity_type == "spot",
            or_(
                JobAttempt.created_at >= since,
                JobAttempt.ended_at.is_(None),
                JobAttempt.ended_at >= since,
            ),
        )
    )
    found: dict[tuple[str, str], list[SpotAttempt]] = {}
    for zone, kind, created, started, ended, reason in rows:
        found.setdefault((zone, kind), []).append(SpotAttempt(created, started, ended, reason))
    return found

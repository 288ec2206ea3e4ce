"""Queries placement needs that no other repository answers: what the service observed of spot."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import SpotObservation


def spot_observations(session: Session) -> list[SpotObservation]:
    return list(session.scalars(select(SpotObservation)))

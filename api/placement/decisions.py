"""What decide() returns, one per job that needs something done."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from api.pricing.offers import Offer
from gpujobs.spec import CapacityType


@dataclass(frozen=True, slots=True)
class Place:
    job_id: str
    offer: Offer
    capacity_type: CapacityType
    nodes: int
    price_per_hour: float  # whole job (all nodes), USD/hour
    reservation_id: str | None
    checkpoint_every_seconds: float | None  # None: the spec's own every_steps applies
    expected_cost: float  # marginal USD for the remaining work (0 on reserved)
    expected_finish: datetime
    p_meet_deadline: float
    reason: str


@dataclass(frozen=True, slots=True)
class Defer:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move a running job: checkpoint, stop the current attempt, then place as `to`."""

    job_id: str
    to: Place
    reason: str


Decision = Place | Defer | Reject | Migrate

"""What decide() sees: the world at one instant, assembled by the scheduling loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors
from gpujobs.spec import CapacityType, JobSpec


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a running job runs now."""

    offer_key: str
    capacity_type: CapacityType
    started_at: datetime  # start of the current attempt (its restart delay counts from here)
    reservation_id: str | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    id: str
    team: str
    spec: JobSpec
    submitted_at: datetime
    deadline_at: datetime | None
    remaining_hours: float  # uninterrupted run time left on the requested resources
    state: Literal["pending", "running"] = "pending"
    placement: Placement | None = None
    preemptions: int = 0
    restarts: int = 0
    checkpoint_cost_seconds: float = 30.0  # measured stall per checkpoint, when known


@dataclass(frozen=True, slots=True)
class Reservation:
    """A prepaid pool of nodes; `price_per_hour` (per node) is spent whether used or not."""

    id: str
    instance_type: str
    zone: str
    count: int
    in_use: int
    price_per_hour: float

    @property
    def free(self) -> int:
        return max(0, self.count - self.in_use)


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: datetime
    jobs: Sequence[JobState]
    offers: Sequence[Offer]
    # (zone, instance_type, capacity) known unavailable now (no capacity, recent preemption...)
    unavailable: frozenset[tuple[str, str, CapacityType]] = frozenset()
    reservations: Sequence[Reservation] = ()
    budgets: Mapping[str, float | None] = field(
        default_factory=dict
    )  # USD left; None/absent: no cap
    priors: Priors | None = None  # None: the shipped priors
    # learned per-(zone, instance_type) posteriors that override the priors
    rates: Mapping[tuple[str, str], PreemptionPrior] = field(default_factory=dict)
    restart_hours: float = 0.2  # provisioning + restore delay of a new attempt
    step_hours: float = 1.0 / 60.0  # time until the next decide(): the policy's reaction time

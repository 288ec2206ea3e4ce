"""The one placement value object: where and how a job runs, and what that is expected to cost.

decide() places a job with one, the estimate lists them, the scheduler copies one into the
attempt row (what the launcher starts and the ledger bills), and the contract's `Plan` is its
wire form."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from api.pricing.offers import Offer
from gpujobs.spec import CapacityType


@dataclass(frozen=True, slots=True)
class Plan:
    offer: Offer
    capacity_type: CapacityType
    nodes: int
    price_per_hour: float  # whole job (all nodes), USD/hour
    reservation_id: str | None
    # What the trainer is told; None only when the spec sets every_steps (the trainer uses it).
    checkpoint_every_seconds: float | None
    expected_cost: float  # marginal USD for the remaining work on this option (0 on reserved)
    expected_finish: datetime
    p_meet_deadline: float

    @property
    def key(self) -> tuple[str, CapacityType, str | None]:
        return (self.offer.key, self.capacity_type, self.reservation_id)

    @property
    def on_demand_price_per_hour(self) -> float:
        """What the same hours would cost on-demand: the baseline for savings."""
        on_demand = (self.offer.on_demand_price or 0.0) * self.nodes
        return on_demand if on_demand > 0 else self.price_per_hour

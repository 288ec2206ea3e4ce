"""What decide() chose (`Plan`), and where it runs an attempt (`Plan.placement`, a
`Placement`: api.pricing.offers). The contract's `Plan` is the wire form of `Plan`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from api.pricing.offers import Offer, Placement
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
    # No estimated_hours and no measured rate: the figures rest on the worker's default hours,
    # and the odds of the deadline would be a guess shown as a measure (0 for a job that may
    # take minutes), so the event leaves them out.
    work_assumed: bool = False

    @property
    def key(self) -> tuple[str, CapacityType, str | None]:
        return (self.offer.key, self.capacity_type, self.reservation_id)

    @property
    def on_demand_price_per_hour(self) -> float:
        """What the same hours would cost on-demand: the baseline for savings."""
        on_demand = (self.offer.on_demand_price or 0.0) * self.nodes
        return on_demand if on_demand > 0 else self.price_per_hour

    @property
    def placement(self) -> Placement:
        """Where this plan runs the job: the value the attempt, the launch and the ledger use."""
        offer = self.offer
        return Placement(
            cloud=offer.cloud,
            region=offer.region,
            zone=offer.zone,
            instance_type=offer.instance_type,
            gpu_model=offer.gpu_model,
            gpu_count=offer.gpu_count,
            nodes=self.nodes,
            capacity_type=self.capacity_type,
            price_per_hour=self.price_per_hour,
            on_demand_price_per_hour=self.on_demand_price_per_hour,
            reservation_id=self.reservation_id,
        )

"""The placement value objects: what decide() chose (`Plan`) and where an attempt runs
(`Placement`).

`Placement` is the one value that travels from the decision to the bill: a `Place`'s plan yields
it, the scheduler stores it as the attempt row's columns (`JobAttempt.placed`), the launcher is
handed it (`LaunchRequest.placement`), and the ledger reads it back (`JobAttempt.placement`,
`LedgerRow.placement`). Nothing on that path copies its fields one by one. The contract's `Plan`
is the wire form of `Plan`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from api.pricing.offers import Offer
from gpujobs.spec import CapacityType


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and how an attempt runs, and its price. The field names are the `job_attempts`
    column names (the ORM maps one onto the other by name)."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_model: str
    gpu_count: int  # per node
    nodes: int
    capacity_type: CapacityType
    price_per_hour: float  # whole attempt (all nodes), USD/hour
    on_demand_price_per_hour: float  # the same hours on-demand: the baseline for savings
    reservation_id: str | None = None

    @property
    def offer_key(self) -> str:
        """The key of the catalog offer this runs on (`Offer.key`)."""
        return Offer.key_of(
            self.cloud, self.zone, self.instance_type, self.gpu_model, self.gpu_count
        )

    @property
    def gpus(self) -> int:
        return self.gpu_count * self.nodes


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

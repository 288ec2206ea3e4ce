"""An offer: one instance type in one zone, with its on-demand and spot prices; and a `Placement`:
where an attempt runs on one, on what capacity, at what price.

`Placement` is the one value that travels from the decision to the bill: a `Place`'s plan yields
it (`api.placement.Plan.placement`), the scheduler stores it as the attempt row's columns
(`JobAttempt.placed`), the launcher is handed it (`LaunchRequest.placement`), and the ledger reads
it back (`JobAttempt.placement`, `LedgerRow.placement`). Nothing on that path copies its fields one
by one. It lives here, below both the ORM and the placement policy, so that the ORM maps it without
importing the policy."""

from __future__ import annotations

from dataclasses import dataclass

from gpujobs.spec import CapacityType


@dataclass(frozen=True, slots=True)
class Offer:
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gb: float | None  # per GPU, GiB
    vcpus: float | None
    ram_gb: float | None
    on_demand_price: float | None  # USD/hour for one node, None = not offered
    spot_price: float | None
    host_estimated: bool = False  # GCP: host VM price estimated and added (see build_catalog)

    @property
    def key(self) -> str:
        """Stable identity; GCP instance types are shared by GPU models, so the GPUs are in it."""
        return self.key_of(
            self.cloud, self.zone, self.instance_type, self.gpu_model, self.gpu_count
        )

    @staticmethod
    def key_of(cloud: str, zone: str, instance_type: str, gpu_model: str, gpu_count: int) -> str:
        """The key of an offer known by its identity alone (an attempt row, say)."""
        return f"{cloud}:{zone}:{instance_type}:{gpu_model}x{gpu_count}"

    def price(self, capacity: CapacityType) -> float | None:
        """Price per node-hour on a capacity type; reserved capacity is priced by its pool."""
        if capacity == CapacityType.SPOT:
            return self.spot_price
        if capacity == CapacityType.ON_DEMAND:
            return self.on_demand_price
        return None


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

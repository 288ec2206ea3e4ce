"""What the planning and admin endpoints accept and return: catalog offers, estimated plans,
reservations and the body that sets a team's budget (the budget itself is `gpujobs.usage.Budget`,
in micro-dollars like the rest of the usage contract). Prices are USD per hour, costs USD."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpujobs.resources import Quote
from gpujobs.spec import CapacityType, Instant


class CatalogOffer(BaseModel):
    """One instance type in one zone, with its list prices for one node."""

    key: str = Field(description="Stable identity: cloud:zone:instance_type:GPUxcount.")
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_model: str
    gpu_count: int = Field(description="GPUs per node.")
    gpu_memory_gb: float | None = Field(None, description="Per GPU, GiB.")
    vcpus: float | None = None
    ram_gb: float | None = None
    on_demand_price: float | None = Field(None, description="USD/hour per node; None: not sold.")
    spot_price: float | None = Field(None, description="USD/hour per node; None: not sold.")
    host_estimated: bool = Field(False, description="GCP: the host VM's price is estimated.")


class OfferList(BaseModel):
    items: list[CatalogOffer] = Field(description="Cheapest first on the chosen capacity.")
    total: int = Field(description="Offers matching the filters, before `limit`.")


class Plan(BaseModel):
    """One way to run a job: an offer, a capacity type and what it is expected to cost."""

    gpu_model: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    nodes: int
    price_per_hour: float = Field(description="All the job's nodes, USD/hour.")
    expected_cost: float = Field(
        description="Expected USD for the whole run, preemptions included (0 on reserved)."
    )
    expected_finish: datetime = Field(
        description="When the job ends if it stays on this plan to the end: on spot, "
        "preemptions and the waits for capacity to return included, never moving to on-demand. "
        "Estimate.quote is the policy as it will run, moves included."
    )
    p_meet_deadline: float = Field(
        ge=0, le=1, description="Chance of finishing by the deadline staying on this plan."
    )
    checkpoint_every_seconds: float | None = Field(
        None, description="What the trainer is told; None: the spec's every_steps applies."
    )
    reservation_id: str | None = None
    offer: CatalogOffer
    chosen: bool = Field(False, description="The plan the scheduler would place the job on now.")
    why: str = Field("", description="Why the scheduler takes it, or why it loses to the chosen.")
    available: bool = Field(
        True, description="False: something stops it now (capacity, price cap, free nodes)."
    )


class Estimate(BaseModel):
    decision: Literal["place", "wait", "reject"] = Field(
        description="What the scheduler would do with the spec now."
    )
    reason: str = Field(description="Why, in the scheduler's words.")
    plans: list[Plan] = Field(
        description="The chosen plan first (when there is one), then cheapest expected cost."
    )
    estimated_hours: float
    deadline_at: datetime | None = None
    remaining_budget: float | None = Field(
        None, description="The team's budget left this month, USD; None: no budget set."
    )
    quote: Quote | None = Field(
        None,
        description="The policy as it will run, not one plan to the end: what submitting now "
        "would be quoted and hold of the budget; None when nothing could run it.",
    )
    generated_at: datetime


class ReservationCreate(BaseModel):
    """Prepaid capacity: `count` nodes of an instance type in a zone."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    cloud: str = Field(min_length=1, max_length=20)
    region: str = Field(min_length=1, max_length=40)
    zone: str = Field(min_length=1, max_length=40)
    instance_type: str = Field(min_length=1, max_length=60)
    count: int = Field(ge=1, le=100_000, description="Nodes reserved.")
    price_per_hour: float = Field(
        ge=0, le=100_000, allow_inf_nan=False, description="USD/hour per node, paid used or not."
    )
    # Instant: an offset that moves the time out of what UTC can hold is a 422, not a 500.
    starts_at: Instant | None = None
    ends_at: Instant | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ReservationCreate:
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            raise ValueError("ends_at must be after starts_at")
        return self


class Reservation(BaseModel):
    id: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    count: int
    in_use: int = Field(description="Nodes of running attempts placed on it now.")
    price_per_hour: float
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    created_at: datetime


class BudgetUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    monthly_usd: float = Field(ge=0, le=1_000_000_000, allow_inf_nan=False)

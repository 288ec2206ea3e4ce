"""What `GET /v1/usage` returns: spend, savings and lost work from the attempts ledger; and what
every budget route returns (`Budget`).

Money is carried in integer micro-dollars (`*_microusd`), so figures add up exactly; the USD
fields are derived from them for convenience.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, computed_field

from gpujobs.money import MICRO as MICRO


class UsageGroupBy(StrEnum):
    TEAM = "team"
    JOB = "job"
    INSTANCE_TYPE = "instance_type"
    CAPACITY_TYPE = "capacity_type"
    DAY = "day"


def usd(microusd: int | None) -> float | None:
    return None if microusd is None else microusd / MICRO


class UsageGroup(BaseModel):
    key: str = Field(description="The group: a team, job id, instance type, capacity type or day.")
    label: str | None = Field(None, description="A readable name for the key (a job's name).")
    attempts: int = Field(0, description="Attempts that ran in the period.")
    running: int = Field(0, description="Of those, still running (counted up to now).")
    gpu_hours: float = Field(0.0, description="GPUs x nodes x hours run in the period.")
    cost_microusd: int = 0
    on_demand_cost_microusd: int = Field(
        0, description="What the same hours would have cost on on-demand capacity."
    )
    preemptions: int = Field(0, description="Attempts that ended preempted in the period.")
    lost_gpu_hours: float = Field(
        0.0, description="GPU-hours between the last checkpoint and a preemption."
    )
    lost_cost_microusd: int = 0
    wasted_gpu_hours: float = Field(
        0.0,
        description="GPU-hours of attempts that ended on a configuration error (the job could "
        "not run as specified): all of their time was wasted.",
    )
    wasted_cost_microusd: int = 0
    cost_microusd_by_capacity_type: dict[str, int] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def cost(self) -> float:
        return self.cost_microusd / MICRO

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def on_demand_cost(self) -> float:
        return self.on_demand_cost_microusd / MICRO

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def savings_microusd(self) -> int:
        return self.on_demand_cost_microusd - self.cost_microusd

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def savings(self) -> float:
        return self.savings_microusd / MICRO

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def savings_pct(self) -> float | None:
        """Savings as a percentage of the on-demand cost; None when that is zero."""
        if self.on_demand_cost_microusd <= 0:
            return None
        return round(100 * self.savings_microusd / self.on_demand_cost_microusd, 2)

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def lost_cost(self) -> float:
        return self.lost_cost_microusd / MICRO

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def wasted_cost(self) -> float:
        return self.wasted_cost_microusd / MICRO


class Budget(BaseModel):
    """A team's monthly budget and this calendar month's use of it: what `GET /v1/budget`, the
    admin budget routes and the usage report's `budgets` return."""

    team: str
    month_start: datetime = Field(description="Start of the current calendar month (UTC).")
    monthly_microusd: int | None = Field(None, description="None: no budget set.")
    spent_microusd: int = Field(
        0, description="Spent this month so far, running attempts accrued to now."
    )
    held_microusd: int = Field(
        0,
        description="Held for unfinished jobs: each job's quote (90th percentile) less what it "
        "has spent; released when the job ends.",
    )

    @computed_field(  # type: ignore[prop-decorator]  # mypy rejects decorated properties
        description="Monthly budget - spent - held (may be negative); None: no budget set."
    )
    @property
    def remaining_microusd(self) -> int | None:
        if self.monthly_microusd is None:
            return None
        return self.monthly_microusd - self.spent_microusd - self.held_microusd

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def monthly_usd(self) -> float | None:
        return usd(self.monthly_microusd)

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def spent_usd(self) -> float:
        return self.spent_microusd / MICRO

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def held_usd(self) -> float:
        return self.held_microusd / MICRO

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def remaining_usd(self) -> float | None:
        return usd(self.remaining_microusd)


class UsageReport(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: datetime = Field(alias="from", description="Start of the period (inclusive).")
    to: datetime = Field(description="End of the period (exclusive).")
    group_by: UsageGroupBy
    generated_at: datetime = Field(description="`now` for attempts still running.")
    groups: list[UsageGroup]
    total: UsageGroup
    budgets: list[Budget] = Field(
        default_factory=list, description="Each visible team's budget this calendar month."
    )

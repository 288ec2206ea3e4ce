"""The job spec: what a team asks gpujobs to run.

These models are the public contract: the API validates requests with them, the SDK sends them,
the trainer reads its configuration from them, and the OpenAPI document shows them. Unknown
fields are rejected everywhere so that a typo never silently becomes a default.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
WORKLOAD_PATTERN = r"^([a-z][a-z0-9_]*|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$"
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV_PREFIX = "GPUJOBS_"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class AmpDtype(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    OFF = "off"


class CapacityType(StrEnum):
    RESERVED = "reserved"
    SPOT = "spot"
    ON_DEMAND = "on_demand"


class DataLoaderSpec(StrictModel):
    num_workers: int = Field(2, ge=0, le=64, description="DataLoader worker processes per rank.")
    pin_memory: bool = Field(True, description="Pin host memory (only takes effect on CUDA).")
    prefetch_factor: int = Field(2, ge=1, le=64, description="Batches prefetched per worker.")
    persistent_workers: bool = Field(True, description="Keep workers alive between epochs.")


class CheckpointSpec(StrictModel):
    """When to checkpoint. Neither interval set means `auto`: the scheduler picks the interval
    from the checkpoint cost and the capacity's preemption rate (Young/Daly)."""

    every_steps: int | None = Field(None, ge=1, le=10_000_000)
    every_seconds: float | None = Field(None, gt=0, le=7 * 24 * 3600)
    keep_last: int = Field(3, ge=1, le=100, description="Complete checkpoints to keep.")
    on_preemption: bool = Field(True, description="Save when the preemption notice arrives.")
    allow_config_change: bool = Field(
        False,
        description="Resume even if the settings that decide what training computes (learning "
        "rate, steps, seed, batch size...) differ from those the checkpoint was saved with.",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_shorthand(cls, value: Any) -> Any:
        if value == "auto":
            return {}
        return value

    @model_validator(mode="after")
    def _one_interval(self) -> CheckpointSpec:
        if self.every_steps is not None and self.every_seconds is not None:
            raise ValueError("set at most one of every_steps and every_seconds")
        return self

    @property
    def auto(self) -> bool:
        return self.every_steps is None and self.every_seconds is None


class TrainerSpec(StrictModel):
    workload: Annotated[str, Field(min_length=1, max_length=200, pattern=WORKLOAD_PATTERN)] = Field(
        "gpt",
        description="A built-in workload (`gpt`, `resnet`) or a user module `pkg.mod:build`.",
    )
    steps: int | None = Field(None, ge=1, le=100_000_000, description="Optimizer steps to run.")
    epochs: int | None = Field(None, ge=1, le=100_000, description="Epochs to run.")
    batch_size: int = Field(8, ge=1, le=65_536, description="Micro-batch size per GPU.")
    amp: AmpDtype = Field(AmpDtype.BF16, description="Mixed precision: bf16, fp16 or off.")
    grad_accum_steps: int = Field(1, ge=1, le=4096)
    grad_checkpointing: bool = False
    learning_rate: float = Field(3e-4, gt=0, le=10)
    max_grad_norm: float | None = Field(1.0, gt=0)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    dataloader: DataLoaderSpec = Field(default_factory=DataLoaderSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    args: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Workload options, passed to the workload's builder."
    )

    @model_validator(mode="after")
    def _one_length(self) -> TrainerSpec:
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("set exactly one of steps and epochs")
        return self

    @field_validator("args")
    @classmethod
    def _small_args(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > 64:
            raise ValueError("at most 64 workload options")
        for key in value:
            if not key or len(key) > 64:
                raise ValueError(f"option name {key!r} must be 1-64 characters")
        return value


class ResourcesSpec(StrictModel):
    gpu_models: list[Annotated[str, Field(min_length=1, max_length=40)]] | None = Field(
        None,
        min_length=1,
        max_length=32,
        description="Allowed GPU models, e.g. ['A100', 'H100']; any if unset.",
    )
    min_gpu_memory_gb: float | None = Field(None, gt=0, le=4096)
    gpus_per_node: int = Field(1, ge=1, le=16)
    nodes: int = Field(1, ge=1, le=256)
    clouds: list[Annotated[str, Field(min_length=1, max_length=20)]] | None = Field(
        None, min_length=1, max_length=8
    )
    regions: list[Annotated[str, Field(min_length=1, max_length=40)]] | None = Field(
        None, min_length=1, max_length=64
    )


class CapacitySpec(StrictModel):
    types: list[CapacityType] = Field(
        default_factory=lambda: [CapacityType.RESERVED, CapacityType.SPOT, CapacityType.ON_DEMAND],
        min_length=1,
        max_length=3,
        description="Capacity types the job may run on.",
    )
    max_price_per_hour: float | None = Field(
        None, gt=0, le=100_000, description="Highest price the whole job may run at, USD/hour."
    )
    on_budget_exceeded: Literal["reject", "defer"] = Field(
        "reject", description="What to do when the team's remaining budget cannot pay for it."
    )

    @field_validator("types")
    @classmethod
    def _unique(cls, value: list[CapacityType]) -> list[CapacityType]:
        if len(set(value)) != len(value):
            raise ValueError("capacity types must not repeat")
        return value


class JobSpec(StrictModel):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    trainer: TrainerSpec
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    deadline: datetime | None = Field(None, description="Absolute deadline (timezone-aware).")
    deadline_hours: float | None = Field(
        None, gt=0, le=24 * 366, description="Deadline in hours from submission."
    )
    estimated_hours: float | None = Field(
        None,
        gt=0,
        le=24 * 366,
        description="Expected uninterrupted run time on the requested resources; "
        "the scheduler refines it from the trainer's measured progress.",
    )
    priority: int = Field(50, ge=0, le=100, description="Higher runs first when capacity is short.")
    max_restarts: int = Field(
        3, ge=0, le=1000, description="Restarts after failures (preemptions do not count)."
    )
    image: str | None = Field(None, min_length=1, max_length=500, pattern=r"^[^\s]+$")
    env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(default_factory=dict)

    @field_validator("deadline")
    @classmethod
    def _future_deadline(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("deadline must include a timezone, e.g. 2026-12-31T00:00:00Z")
        # A stored spec was checked when it was submitted; its deadline may have passed since.
        if not (info.context or {}).get("stored") and value <= datetime.now(UTC):
            raise ValueError("deadline must be in the future")
        return value

    @field_validator("env")
    @classmethod
    def _env_keys(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 128:
            raise ValueError("at most 128 environment variables")
        for key in value:
            if not ENV_KEY.match(key) or len(key) > 128:
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if key.upper().startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{key!r}: the {RESERVED_ENV_PREFIX} prefix is reserved")
        return value

    @model_validator(mode="after")
    def _one_deadline(self) -> JobSpec:
        if self.deadline is not None and self.deadline_hours is not None:
            raise ValueError("set at most one of deadline and deadline_hours")
        return self

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> JobSpec:
        """Load a spec that was validated at submission (skips the checks that depend on now)."""
        return cls.model_validate(data, context={"stored": True})

    def deadline_at(self, submitted_at: datetime) -> datetime | None:
        """The absolute deadline, resolving `deadline_hours` against the submission time."""
        if self.deadline is not None:
            return self.deadline.astimezone(UTC)
        if self.deadline_hours is not None:
            return submitted_at + timedelta(hours=self.deadline_hours)
        return None

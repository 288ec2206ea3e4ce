"""What the API returns: jobs, their attempts and events, progress, pages and errors."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, computed_field

from gpujobs.money import MICRO
from gpujobs.spec import CapacityType, JobSpec

T = TypeVar("T")


class JobStatus(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class Resource(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class Progress(Resource):
    step: int = Field(ge=0)
    total_steps: int | None = Field(None, ge=0)
    loss: float | None = None
    samples_per_s: float | None = Field(
        None,
        ge=0,
        description="The running attempt's rate, samples a second over all ranks: the mean of "
        "its trainer's report windows over time, older seconds discounted over about a minute "
        "(its first window, the warm-up, only until the next), so one window slowed by a "
        "neighbour moves it little: the rate the scheduler counts the work left from.",
    )
    data_wait_fraction: float | None = Field(None, ge=0, le=1)
    checkpoint_stall_s: float | None = Field(None, ge=0)
    checkpoint_step: int | None = Field(None, ge=0, description="Last complete checkpoint.")
    gpu_model: str | None = Field(
        None, description="The GPU model of the attempt that reported: the rate's, that is."
    )
    updated_at: datetime | None = None


class ProgressReport(BaseModel):
    """What a trainer posts to `/v1/jobs/{id}/progress`. The bounds here hold for any
    job; the API holds its figures to the job's own (gpujobs.progress), not here, so a trainer
    building one never fails on its own figures: a report out of them is refused, not a crash."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, le=10**12)
    total_steps: int | None = Field(None, ge=0, le=10**12)
    loss: float | None = Field(None, allow_inf_nan=False)
    # Over all ranks (batch_size x grad_accum_steps x world size a step), over the window since
    # the trainer's last report: the server averages it with the attempt's earlier windows
    # (api.jobs.measured_rate) and the scheduler reads the work left from that
    # (api.placement.snapshot.samples_per_step).
    samples_per_s: float | None = Field(None, ge=0, le=1e12, allow_inf_nan=False)
    measured_at: AwareDatetime | None = Field(
        None,
        description="When the trainer's clock closed the window `samples_per_s` was measured "
        "over. A report that carries the same window again (the one sent as a checkpoint "
        "completes, a post retried after its answer was lost) carries the same time, and the "
        "attempt's rate counts each window once.",
    )
    data_wait_fraction: float | None = Field(None, ge=0, le=1)
    checkpoint_stall_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    checkpoint_step: int | None = Field(None, ge=0, le=10**12)
    attempt_id: str | None = Field(None, max_length=64)


class JobAttempt(Resource):
    id: str
    job_id: str
    number: int
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_model: str
    gpu_count: int
    capacity_type: CapacityType
    nodes: int
    price_per_hour: float = Field(description="Price of all the attempt's nodes, USD/hour.")
    reservation_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end_reason: str | None = None
    cost: float | None = Field(None, description="USD, once the attempt has ended.")
    resume_from_step: int | None = None
    steps_lost: int | None = None
    samples_per_s: float | None = Field(
        None,
        description="The rate its trainer measured on this GPU model, samples a second over "
        "all ranks, its report windows' mean over about the last minute: what the scheduler "
        "learns each model's speed for this trainer from.",
    )
    standby: bool = Field(
        False,
        description="Held beside the job's running attempt, waiting to take over from its "
        "checkpoint (make-before-break); false once a handover made it the running attempt. "
        "Its minutes are billed either way.",
    )
    created_at: datetime


class JobEvent(Resource):
    id: int
    job_id: str
    at: datetime
    from_status: JobStatus | None
    to_status: JobStatus
    reason: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class Quote(BaseModel):
    """What the job is expected to cost and when to finish under the scheduler's policy as it
    will run (spot while the deadline's slack lasts, on-demand when it must, reservations first),
    from many simulated runs over each pool's availability."""

    expected_cost: float = Field(description="USD, mean over the simulated runs.")
    typical_cost: float | None = Field(
        None,
        description="USD, the likely cost: the figure with the least relative error "
        "(|figure - bill| / bill) to the simulated runs' costs, their median weighed by "
        "1 / cost; at or below their plain median, which can sit near neither of two outcomes "
        "(riding spot, a fall to on-demand). Spot costs are right-skewed (a few runs are forced "
        "onto on-demand), so a job's bill lands nearer this than the mean more often than not. "
        "None on jobs quoted before it was recorded.",
    )
    hold_cost: float = Field(
        description="USD, the 90th percentile: what the team's budget holds until the job ends."
    )
    expected_finish: datetime = Field(
        description="Mean finish of the simulated runs of the policy (moves between spot and "
        "on-demand included); a plan's own expected_finish assumes it stays on that plan."
    )
    p_meet_deadline: float = Field(ge=0, le=1, description="Share of runs done by the deadline.")


class Placement(Resource):
    """Where the job's latest attempt runs, or ran: what `ls` shows without fetching attempts."""

    attempt: int = Field(ge=1, description="The attempt's number.")
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_model: str
    gpu_count: int = Field(ge=0, description="GPUs per node.")
    nodes: int = Field(ge=1)
    capacity_type: CapacityType
    price_per_hour: float = Field(description="Price of all the attempt's nodes, USD/hour.")
    started_at: datetime | None = None
    ended_at: datetime | None = Field(None, description="None while the attempt holds capacity.")


class Job(Resource):
    id: str
    team: str
    name: str
    status: JobStatus
    status_reason: str | None = None
    spec: JobSpec
    created_at: datetime
    updated_at: datetime
    deadline_at: datetime | None = None
    restarts: int = Field(0, description="Restarts after failures.")
    preemptions: int = 0
    attempts: int = Field(0, description="Placements so far.")
    resume_from_step: int | None = None
    progress: Progress | None = None
    quote: Quote | None = Field(None, description="The quote at submit; None: not quoted.")
    placement: Placement | None = Field(None, description="The latest attempt; None: not placed.")
    cost_microusd: int = Field(
        0,
        ge=0,
        description="Spent so far, in micro-dollars: ended attempts at their recorded cost, a "
        "running one at its price up to the response. The figure to show; do not re-add.",
    )

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorated properties
    @property
    def cost(self) -> float:
        """USD, from `cost_microusd`."""
        return self.cost_microusd / MICRO


SIMULATED_NOTICE = (
    "simulated: the local launcher runs each job as a process on the worker's machine; its "
    "cloud, instance and prices are what the scheduler would pick on Kubernetes, not billed"
)


class Deployment(BaseModel):
    """What runs this API's jobs. With the local launcher a placement and its costs are the
    scheduler's choice played out on one machine: shown with `notice`, never as cloud capacity."""

    launcher: str = Field(
        description="GPUJOBS_LAUNCHER: `local` (processes on the worker's machine) or `kubernetes`."
    )
    # The launcher's to say (api.launchers.traits.LauncherTraits), not the client's to infer
    # from its name.
    simulated: bool = Field(
        description="True: every cloud, instance, price and cost shown is simulated."
    )

    @computed_field(  # type: ignore[prop-decorator]
        description="One line to show with placements and costs; None when they are real."
    )
    @property
    def notice(self) -> str | None:
        return SIMULATED_NOTICE if self.simulated else None


class ArtifactFile(BaseModel):
    name: str
    size: int = Field(ge=0, description="Bytes.")
    sha256: str
    url: str = Field(description="GET it with the same token to download the bytes.")


class Checkpoint(BaseModel):
    step: int = Field(ge=0, description="Optimizer steps done when it was saved.")
    files: list[ArtifactFile]


class Artifacts(BaseModel):
    job_id: str
    final_step: int | None = Field(
        None, description="The checkpoint holding the trained weights, once the job succeeded."
    )
    checkpoints: list[Checkpoint] = Field(description="Complete checkpoints, oldest first.")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page.")


class FieldError(BaseModel):
    field: str = Field(description="Dotted path of the offending field, e.g. `trainer.steps`.")
    reason: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    fields: list[FieldError] = Field(default_factory=list)


class ErrorBody(BaseModel):
    error: ErrorDetail

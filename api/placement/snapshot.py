"""What decide() sees: the world at one instant, assembled by the scheduling loop."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from api.pricing.cost_model import CHECKPOINT_COST_SECONDS, RESTART_HOURS
from api.pricing.gpu_speed import pace, reference_gpu
from api.pricing.offers import Offer
from api.pricing.preemption import PreemptionPrior, Priors
from api.progress import Progress
from gpujobs.progress import MAX_CHECKPOINT_STALL_S
from gpujobs.progress import samples_per_step as samples_per_step
from gpujobs.spec import CapacityType, JobSpec


@dataclass(frozen=True, slots=True)
class Current:
    """Where a running job runs now, as decide() needs it: its attempt's `Placement.offer_key`,
    capacity type and reservation, and when the attempt started."""

    offer_key: str
    capacity_type: CapacityType
    started_at: datetime  # start of the current attempt (its restart delay counts from here)
    reservation_id: str | None = None
    # A standby handed over: its restart was spent beside the attempt it took over from.
    warm: bool = False
    attempt_id: str | None = None
    # Its attempt is being stopped, or (a standby) its handover has begun: nothing to decide.
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class JobState:
    id: str
    team: str
    spec: JobSpec
    submitted_at: datetime
    deadline_at: datetime | None
    # uninterrupted run time left on the spec's reference GPU (gpu_speed.reference_gpu): an
    # option of another model takes Option.pace times as long
    remaining_hours: float
    state: Literal["pending", "running"] = "pending"
    current: Current | None = None  # set for a running job
    preemptions: int = 0
    restarts: int = 0
    team_name: str | None = None  # for messages; `team` is the id
    checkpoint_cost_seconds: float = CHECKPOINT_COST_SECONDS  # measured stall, when known
    # one optimizer step on the reference GPU, when known (every_steps -> seconds)
    step_seconds: float | None = None
    # Spot offers (keys) that preempted this job before its first checkpoint: backed off for it.
    avoid: frozenset[str] = frozenset()
    spot_strikes: int = 0  # such preemptions in a row, wherever: SPOT_STRIKES stops spot for it
    quote_usd: float | None = None  # the hold of its quote at submit (USD), when quoted
    budget_held: bool = False  # that hold already counts against the team's budget
    # GPU speeds from what the team's trainer measured (api.placement.throughput), in place of
    # the snapshot's table for this job; None: the table's
    gpu_speeds: Mapping[str, float] | None = None
    standby: Current | None = None  # the standby held beside the running attempt, if any
    # Spot offers (keys) where a standby of this job failed, or never waited: not tried again
    # for it (an image its spot nodes cannot pull, a GPU too small: such failures repeat).
    no_standby: frozenset[str] = frozenset()
    # (field, why): a number its row holds out of gpujobs.progress's bounds, found where the row
    # was read (api.placement.world); decide() sets the job aside without weighing it.
    cannot_weigh: tuple[str, str] | None = None


def unweighable(job: JobState) -> tuple[str, str] | None:
    """(field, why) for a number of the job's state decide() cannot weigh; None: it can. The
    state's own figures are held to what a bounded report can yield, whoever built it."""
    if job.cannot_weigh is not None:
        return job.cannot_weigh
    checks: tuple[tuple[str, float | None, float, float], ...] = (
        ("remaining_hours", job.remaining_hours, 0.0, math.inf),
        ("checkpoint_cost_seconds", job.checkpoint_cost_seconds, 0.0, MAX_CHECKPOINT_STALL_S),
        ("step_seconds", job.step_seconds, math.ulp(0.0), math.inf),
        ("quote_usd", job.quote_usd, 0.0, math.inf),
        *(
            (f"gpu_speeds.{m}", v, math.ulp(0.0), math.inf)
            for m, v in (job.gpu_speeds or {}).items()
        ),
    )
    for name, value, lowest, highest in checks:
        if value is None:
            continue
        if not math.isfinite(value):
            return name, f"is {value}, not a finite number"
        if not lowest <= value <= highest:
            return name, f"is {value:g}, out of [{lowest:g}, {highest:g}]"
    return None


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
    # learned per-(zone, instance_type) posteriors that override the priors: what decide()
    # judges now by, recent evidence weighing more (world.EVIDENCE_HALF_LIFE)
    rates: Mapping[tuple[str, str], PreemptionPrior] = field(default_factory=dict)
    # the same pools over the whole observation window, every sight weighing alike: the quote's
    # forecast of the job's whole run; None: `rates`
    forecast_rates: Mapping[tuple[str, str], PreemptionPrior] | None = None
    restart_hours: float = RESTART_HOURS  # provisioning + restore delay of a new attempt
    step_hours: float = 1.0 / 60.0  # time until the next decide(): the policy's reaction time
    # lower-cased GPU model -> training speed (api.pricing.gpu_speed); empty: every model alike
    gpu_speeds: Mapping[str, float] = field(default_factory=dict)
    # the launcher can hold a standby beside a running attempt (make-before-break)
    standby: bool = False
    # The spot market's simulated seconds per wall-clock second (the local launcher's simulated
    # market, Settings.market_time_scale); 1: a real market. Only its words follow it
    # (market_clock): the figures weighed are the market's hours either way.
    time_scale: float = 1.0


def measured_pace(spec: JobSpec, progress: Progress | None, speeds: Mapping[str, float]) -> float:
    """Hours on the spec's reference GPU per hour on the GPU its reported rate was measured on
    (`Progress.gpu_model`, the reporting attempt's, recorded by the server)."""
    measured_on = progress.gpu_model if progress else None
    if measured_on is None:
        return 1.0
    return pace(speeds, measured_on=measured_on, runs_on=reference_gpu(spec))


def step_seconds(
    spec: JobSpec,
    progress: Progress | None = None,
    speeds: Mapping[str, float] | None = None,
) -> float | None:
    """One optimizer step on the reference GPU: measured once the trainer reports (converted
    from the GPU it ran on), else the spec's estimate / steps."""
    rate = progress.samples_per_s if progress else None
    if rate and rate > 0:
        seconds = samples_per_step(spec) / rate * measured_pace(spec, progress, speeds or {})
        # NaN (an infinite rate on a GPU of no speed): a step that cannot be timed, set aside
        # by decide() as the infinite one of a vanishing rate is (unweighable).
        return math.inf if math.isnan(seconds) else float(seconds)
    total = (progress.total_steps if progress else None) or spec.trainer.steps
    if total and total > 0 and spec.estimated_hours:
        return float(spec.estimated_hours * 3600.0 / total)
    return None


def prospective(
    spec: JobSpec,
    *,
    team: str,
    team_name: str | None,
    now: datetime,
    job_id: str = "estimate",
    checkpoint_cost_seconds: float = CHECKPOINT_COST_SECONDS,
    gpu_speeds: Mapping[str, float] | None = None,
) -> JobState:
    """A spec about to be submitted, as decide() would see it the moment it is;
    `checkpoint_cost_seconds`: what the team's earlier run of its trainer measured, if one did;
    `gpu_speeds`: the speeds its team's runs of the trainer measured, if any did."""
    return JobState(
        id=job_id,
        team=team,
        spec=spec,
        submitted_at=now,
        deadline_at=spec.deadline_at(now),
        remaining_hours=spec.estimated_hours or 0.0,
        team_name=team_name,
        checkpoint_cost_seconds=checkpoint_cost_seconds,
        step_seconds=step_seconds(spec),
        gpu_speeds=gpu_speeds,
    )

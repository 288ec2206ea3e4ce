"""The pure half of decide()'s view of jobs (api.placement.world reads the rows): the service's
settings that decide() weighs, what a team's earlier runs measured of a job's trainer, and the
work a job has left. The scheduler, admission and the estimate all take them from here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from api.placement.snapshot import measured_pace, samples_per_step
from api.placement.throughput import learned_speeds
from api.pricing.gpu_speed import Speeds
from api.progress import Progress
from gpujobs.spec import JobSpec

# Used when a spec gives no estimate and the trainer has not yet reported a rate.
DEFAULT_ESTIMATED_HOURS = 1.0


@dataclass(frozen=True, slots=True)
class Calibration:
    """The settings decide() weighs, read once for a snapshot (world.calibration)."""

    restart_hours: float  # provisioning + restore delay of a new attempt
    step_hours: float  # the scheduler's interval: decide()'s reaction time
    gpu_speeds: Speeds = field(default_factory=dict)  # normalized; empty: every model alike
    time_scale: float = 1.0  # the spot market's clock (Snapshot.time_scale); 1: real


@dataclass(frozen=True, slots=True)
class Measured:
    """What the team's earlier jobs of a job's trainer measured (api.placement.repository), for
    what the job has not measured itself."""

    checkpoint_cost: float | None = None  # seconds one checkpoint stalled
    rates: Mapping[str, float] | None = None  # samples a second per lower-cased GPU model

    def speeds(self, table: Speeds) -> Speeds | None:
        """The job's own speeds from the rates; None: the table's stand for it."""
        return learned_speeds(table, self.rates) if self.rates else None


def remaining_hours(
    spec: JobSpec,
    *,
    progress: Progress | None,
    resume_from_step: int | None,
    speeds: Mapping[str, float] | None = None,
) -> float:
    """Work left, in hours on the spec's reference GPU (api.pricing.gpu_speed).

    Counted from the last complete checkpoint (work after it is lost on a preemption). The
    trainer's measured rate wins over the spec's estimate once it has reported one; it was
    measured on the reporting attempt's GPU, so `speeds` converts it.
    """
    total = (progress.total_steps if progress else None) or spec.trainer.steps
    done = resume_from_step or 0
    rate = progress.samples_per_s if progress else None
    if total and rate and rate > 0:
        # A rate or step count past any bound (a row written before gpujobs.progress held)
        # counts as work that cannot be counted: decide() sets the job aside (math.inf).
        seconds_per_step = samples_per_step(spec) / rate
        hours = (total - done) * seconds_per_step / 3600.0
        return _hours(hours * measured_pace(spec, progress, speeds or {}))
    estimate = spec.estimated_hours or DEFAULT_ESTIMATED_HOURS
    if total:
        return _hours(estimate * max(0.0, 1.0 - done / total))
    return estimate


def _hours(value: float) -> float:
    """Non-negative hours: NaN (inf - inf, 0 x inf) is work that cannot be counted."""
    return math.inf if math.isnan(value) else max(0.0, float(value))

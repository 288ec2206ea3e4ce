"""What a trainer's figures may be: the bounds every number of its progress report is held to
where it enters (the API's /v1/jobs/{id}/progress: a 422 naming the field), and again where the
scheduler reads one back from a row written before they held (api.placement.world).

A report is a team's word, and the scheduler weighs it for the job and prices the team's later
jobs of the trainer by it. Unbounded, one report stopped every team's placements (a rate of
5e-324 samples a second left the work's steps an hour at zero, and the pass divided by it) and
priced the team's next submits at 6e302 USD. The bounds are what the machine and the job can
be, never what the trainer says:
- steps: the job's own `trainer.steps` (a job of epochs counts its steps itself, so there only
  MAX_STEP, what the rows hold);
- a rate: 0 (no step ended in the window), or between one step in MAX_STEP_SECONDS and
  MAX_STEPS_PER_SECOND steps a second, times the job's samples a step;
- a checkpoint's stall: at most MAX_CHECKPOINT_STALL_S.
"""

from __future__ import annotations

import math

from gpujobs.spec import MAX_PLANNED_HOURS, JobSpec

# Steps are 32-bit integer columns (jobs.resume_from_step, the attempts' steps).
MAX_STEP = 2**31 - 1
# No optimizer step of any model takes under 10 µs: launching its kernels alone takes longer on
# the fastest GPU (several launches of about 5 µs), and the trainer's Python loop more. A window
# of one step lasts at least that step, so an honest rate is never faster.
MAX_STEPS_PER_SECOND = 100_000.0
# A rate at which one step outlasts the longest run a spec may plan for (deadline_hours and
# estimated_hours are at most MAX_PLANNED_HOURS) leaves nothing to plan with: no finish, cost
# or deadline the scheduler weighs means anything for it.
MAX_STEP_SECONDS = MAX_PLANNED_HOURS * 3600.0
# Twice and more what writing the whole training state of the largest model one GPU here
# trains takes at 100 MB/s, a slow disk's pace: gpujobs.workloads.MAX_PARAMETERS x 12 bytes
# (fp32 weights and Adam's two moments; gradients are not saved), 144 GB, in 24 minutes
# (tests/test_workloads.py holds the two together).
MAX_CHECKPOINT_STALL_S = 3600.0
SAVED_BYTES_PER_PARAMETER = 12


def samples_per_step(spec: JobSpec) -> int:
    """Samples one optimizer step takes over the whole job, as the trainer counts them in the
    `samples_per_s` it reports: `batch_size` is per GPU, and every GPU runs one rank."""
    resources, trainer = spec.resources, spec.trainer
    world_size = resources.nodes * resources.gpus_per_node
    return trainer.batch_size * trainer.grad_accum_steps * world_size


def problems(
    spec: JobSpec,
    *,
    step: object = None,
    total_steps: object = None,
    checkpoint_step: object = None,
    samples_per_s: object = None,
    checkpoint_stall_s: object = None,
) -> list[tuple[str, str]]:
    """(field, reason) for each figure out of the job's bounds; None: not reported. Values are
    taken as stored too (decoded JSON, a column), so anything that is not a number is one."""
    found: list[tuple[str, str]] = []
    last = spec.trainer.steps if spec.trainer.steps is not None else MAX_STEP
    whose = "the job's steps" if spec.trainer.steps is not None else "the most a job may count"
    for name, value in (
        ("step", step),
        ("total_steps", total_steps),
        ("checkpoint_step", checkpoint_step),
    ):
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            found.append((name, "must be an integer"))
        elif not 0 <= value <= last:
            found.append((name, f"must be between 0 and {last}, {whose}"))
    if samples_per_s is not None:
        reason = _rate_problem(spec, samples_per_s)
        if reason is not None:
            found.append(("samples_per_s", reason))
    if checkpoint_stall_s is not None:
        stall = _number(checkpoint_stall_s)
        if stall is None or not 0.0 <= stall <= MAX_CHECKPOINT_STALL_S:
            found.append(
                ("checkpoint_stall_s", f"must be between 0 and {MAX_CHECKPOINT_STALL_S:g} seconds")
            )
    return found


def _rate_problem(spec: JobSpec, value: object) -> str | None:
    rate = _number(value)
    if rate is None or rate < 0:
        return "must be a finite number >= 0"
    if rate == 0:
        return None
    per_step = samples_per_step(spec)
    slowest = per_step / MAX_STEP_SECONDS
    fastest = per_step * MAX_STEPS_PER_SECOND
    if slowest <= rate <= fastest:
        return None
    return (
        f"must be 0 or between {slowest:.3g} and {fastest:.3g} samples a second for this job "
        f"({per_step} samples a step: at most {MAX_STEPS_PER_SECOND:g} steps a second, at "
        f"least one step in {MAX_PLANNED_HOURS:g} hours)"
    )


def _number(value: object) -> float | None:
    """A finite float, or None for anything else (a string, a bool, NaN, infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past any float, from decoded JSON
        return None
    return number if math.isfinite(number) else None

"""How fast each GPU model trains, relative to an A100: what an hour of work on one model is on
another.

A job's `estimated_hours` is hours on its reference GPU (the first of `resources.gpu_models`, an
A100 when it names none) and its trainer's measured rate is hours on the GPU it ran on. The same
work on a model twice as fast takes half the hours, and costs half as many of its hourly prices:
so offers are ranked by price per unit of work, and the deadline rule counts the work left in
hours of the GPU it would fall back to. Without this, a job allowed [A100, H100, L4] was quoted
its A100 hours at the L4's price, and a job measured on a spot H100 counted its work left in
H100 hours while its on-demand fallback was an A100, twice as slow.

DEFAULT_SPEEDS is a rough figure for dense bf16/fp16 training of a mid-sized model on one GPU,
where memory bandwidth and tensor throughput both matter (peak tensor FLOPS overstate the newer
models: an H100 trains about twice as fast as an A100 in practice, not the three times its
datasheet says). Workloads differ; operators set `GPUJOBS_GPU_SPEEDS` to what their own
workloads measure. With the local launcher every offer runs on this machine's CPU, so the
speeds are uniform there (api.settings).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpujobs.spec import JobSpec

REFERENCE_GPU = "A100"

DEFAULT_SPEEDS: dict[str, float] = {
    "B200": 4.0,
    "H200": 2.3,
    "H100": 2.0,
    "H100-MEGA": 2.0,
    "A100": 1.0,
    "A100-80GB": 1.05,
    "L40S": 0.9,
    "V100": 0.45,
    "A10G": 0.3,
    "L4": 0.25,
    "P100": 0.18,
    "T4": 0.15,
    "P4": 0.07,
    "K80": 0.05,
}

Speeds = Mapping[str, float]  # lower-cased GPU model -> speed; empty: every model alike


def normalized(speeds: Mapping[str, float] | None) -> dict[str, float]:
    return {model.lower(): float(speed) for model, speed in (speeds or {}).items()}


def over_the_table(speeds: Mapping[str, float]) -> dict[str, float]:
    """The default table with `speeds` in place of its figures (model names match whatever
    their case)."""
    merged = {model.lower(): (model, speed) for model, speed in DEFAULT_SPEEDS.items()}
    for model, speed in speeds.items():
        merged[model.lower()] = (merged.get(model.lower(), (model, 0.0))[0], float(speed))
    return dict(merged.values())


def reference_gpu(spec: JobSpec) -> str:
    """The GPU model the spec's `estimated_hours` is measured on."""
    models = spec.resources.gpu_models
    return models[0] if models else REFERENCE_GPU


def speed_of(speeds: Speeds, model: str | None) -> float:
    """A model's speed; a model the table does not name counts as an A100, and an empty table
    makes every model alike."""
    if not speeds or model is None:
        return 1.0
    return speeds.get(model.lower()) or speeds.get(REFERENCE_GPU.lower()) or 1.0


def pace(speeds: Speeds, *, measured_on: str | None, runs_on: str | None) -> float:
    """Hours on `runs_on` per hour of work measured on `measured_on`."""
    return speed_of(speeds, measured_on) / speed_of(speeds, runs_on)

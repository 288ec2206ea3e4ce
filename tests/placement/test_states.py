"""decide()'s view of a job from its row: how much work is left, read from the trainer's rate."""

from __future__ import annotations

import pytest

from api.placement.snapshot import step_seconds
from api.placement.states import remaining_hours
from api.pricing.gpu_speed import normalized
from api.progress import read
from gpujobs.spec import JobSpec


def test_work_left_counts_the_samples_of_every_rank() -> None:
    """The trainer reports samples per second over all its ranks (trainer.loop: batch x
    accumulation x world size a step); `batch_size` is per GPU. Read per GPU, a 2 x 4-GPU job
    looked 8 times closer to done than it was, and the deadline rule waited on spot that long."""
    spec = JobSpec.model_validate(
        {
            "name": "ddp",
            "trainer": {"steps": 1000, "batch_size": 8, "grad_accum_steps": 2},
            "resources": {"gpus_per_node": 4, "nodes": 2},
            "estimated_hours": 1,
        }
    )
    # 8 ranks x 8 samples x 2 micro-batches = 128 samples a step; 1,280 samples/s = 10 steps/s
    progress = read({"step": 430, "total_steps": 1000, "samples_per_s": 1280.0})
    left = remaining_hours(spec, progress=progress, resume_from_step=400)
    assert left == pytest.approx(600 / 10 / 3600)
    assert step_seconds(spec, progress) == pytest.approx(0.1)


def test_a_rate_measured_on_one_gpu_is_work_in_hours_of_the_reference_gpu() -> None:
    """The rate an H100 attempt reported is half the hours on the A100 the spec was sized on
    (the first model it names); with every model alike (the local launcher) it is as measured."""
    spec = JobSpec.model_validate(
        {
            "name": "mixed",
            "trainer": {"steps": 1000, "batch_size": 10},
            "resources": {"gpu_models": ["A100", "H100"]},
            "estimated_hours": 1,
        }
    )
    progress = read({"step": 100, "total_steps": 1000, "samples_per_s": 100.0, "gpu_model": "H100"})
    speeds = normalized({"A100": 1.0, "H100": 2.0})
    left = remaining_hours(spec, progress=progress, resume_from_step=100, speeds=speeds)
    assert left == pytest.approx(2 * 900 / 10 / 3600)
    assert step_seconds(spec, progress, speeds) == pytest.approx(0.2)
    as_measured = remaining_hours(spec, progress=progress, resume_from_step=100, speeds={})
    assert as_measured == pytest.approx(900 / 10 / 3600)

"""decide()'s view of a job from its row: how much work is left, read from the trainer's rate."""

from __future__ import annotations

import pytest

from api.models import Job
from api.placement.snapshot import step_seconds
from gpujobs.spec import JobSpec
from worker.snapshot import remaining_hours


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
    progress = {"step": 430, "total_steps": 1000, "samples_per_s": 1280.0}
    job = Job(progress=progress, resume_from_step=400)
    assert remaining_hours(job, spec) == pytest.approx(600 / 10 / 3600)
    assert step_seconds(spec, progress) == pytest.approx(0.1)

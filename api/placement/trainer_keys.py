"""What a job's measures are filed under, so that its team's later jobs of the same trainer are
priced with them: the stall of one checkpoint (`checkpoints.checkpoint_key`) and the speed on each
GPU model (`throughput.throughput_key`). A job's row keeps them from its submit on: the field
names are its columns (`jobs.checkpoint_key`, `jobs.throughput_key`), which submit fills from
`trainer_keys` without naming them."""

from __future__ import annotations

from dataclasses import dataclass

from api.placement.checkpoints import checkpoint_key
from api.placement.throughput import throughput_key
from gpujobs.spec import JobSpec


@dataclass(frozen=True, slots=True)
class TrainerKeys:
    checkpoint_key: str
    throughput_key: str


def trainer_keys(spec: JobSpec) -> TrainerKeys:
    return TrainerKeys(checkpoint_key=checkpoint_key(spec), throughput_key=throughput_key(spec))

"""What a team's trainer measured of its own speed on each GPU model, in place of the table's
rough figures (api.pricing.gpu_speed).

How much faster an H100 trains than an A100 depends on the model: a small one bound by memory
bandwidth or the input pipeline gains far less than the datasheet says, a large one in bf16
gains more. Every attempt keeps the rate its trainer reported, averaged over time
(`job_attempts.samples_per_s`, api.jobs.measured_rate; samples a second over all ranks) next to
its GPU model. A job's speeds are then what the team's
attempts of the same trainer measured on each model, the other models scaled from the table by
how the measured ones compare to it. The key is what sets the rate: the image, the workload and
its `args`, the per-GPU batch, precision, activation checkpointing, the input pipeline and the
gang's shape; steps, learning rate and checkpoint cadence do not change it. Only the team's own
jobs count, so a trainer that reports a false rate moves only its own team's prices.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Mapping

from api.pricing.gpu_speed import Speeds
from gpujobs.spec import JobSpec


def throughput_key(spec: JobSpec) -> str:
    """What decides a trainer's samples a second on a given GPU, hashed."""
    trainer, resources = spec.trainer, spec.resources
    what = {
        "image": spec.image,
        "workload": trainer.workload,
        "args": trainer.args,
        "batch_size": trainer.batch_size,
        "amp": str(trainer.amp),
        "grad_checkpointing": trainer.grad_checkpointing,
        "dataloader": trainer.dataloader.model_dump(mode="json"),
        "nodes": resources.nodes,
        "gpus_per_node": resources.gpus_per_node,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def several_models(gpu_models: object) -> bool:
    """A spec's `resources.gpu_models` (as stored, or parsed) allows any model or more than one:
    only then do speeds between models matter, and are the team's measures worth a read."""
    return not isinstance(gpu_models, list) or len(gpu_models) > 1


# How far a trainer's measure may move a model from the table's figure, either way: a report
# that far off is a broken (or lying) trainer more likely than a GPU.
MAX_FACTOR = 4.0


def job_speeds(table: Speeds, measured: Mapping[str, float]) -> Speeds:
    """The table with what the trainer measured (lower-cased model -> samples a second): each
    measured model's figure times how its rate compares to the table, relative to the median
    of the measured models (one model measured alone says nothing about the others), bounded
    by MAX_FACTOR. An empty table (every model alike, the local launcher) stays empty: there
    the models are names, and their rates differ only by noise."""
    return learned_speeds(table, measured) or table


def learned_speeds(table: Speeds, measured: Mapping[str, float]) -> Speeds | None:
    """job_speeds when what was measured changes the table, else None: the table's figures,
    and the candidate index's ranking by them, stand for the job."""
    logs = {
        model: math.log(rate) - math.log(table[model])
        for model, rate in measured.items()
        if model in table and math.isfinite(rate) and rate > 0
    }
    if len(logs) < 2:
        return None
    middle = statistics.median(logs.values())
    bound = math.log(MAX_FACTOR)
    return {
        model: speed * math.exp(min(bound, max(-bound, logs[model] - middle)))
        if model in logs
        else speed
        for model, speed in table.items()
    }

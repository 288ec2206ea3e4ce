"""What one checkpoint costs a job whose trainer has not written one yet: what the same team's
latest earlier job of the same trainer measured.

The checkpoint interval (Young/Daly) and the price of checkpointing rest on the stall a
checkpoint causes. Until the trainer reports one it is priced at CHECKPOINT_COST_SECONDS, so a
small model that checkpoints every few seconds was quoted several times its bill on every
first submit. The stall is set by what is saved and where: the image, the workload and its
options, and the world size (each rank saves its own state). Steps, batch size, learning rate,
seed and cadence change how often a checkpoint is written, not what one costs, so they are left
out of the key; so is `env`, which usually names a run (a custom workload that sizes its model
from it shares the key, and its first checkpoint corrects the price). Only the team's own jobs
count: another team's runs are not its business.
"""

from __future__ import annotations

import hashlib
import json

from api.pricing.cost_model import CHECKPOINT_COST_SECONDS
from gpujobs.spec import JobSpec


def checkpoint_key(spec: JobSpec) -> str:
    """What decides a checkpoint's size, hashed: equal keys write equal checkpoints."""
    trainer, resources = spec.trainer, spec.resources
    what = {
        "image": spec.image,
        "workload": trainer.workload,
        "args": trainer.args,
        "world_size": resources.nodes * resources.gpus_per_node,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def checkpoint_cost(measured: float | None, learned: float | None = None) -> float:
    """Seconds one checkpoint costs: the job's own measure, else its team's earlier run's."""
    if measured is not None:
        return measured
    return learned if learned is not None else CHECKPOINT_COST_SECONDS

"""A user workload in a dozen lines: linear regression on a fixed synthetic dataset.

Run it with `"workload": "trainer.examples.linear:build"` in the TrainerSpec, on a deployment
whose operator allows the module (GPUJOBS_WORKLOAD_MODULE_PREFIXES='["trainer.examples"]').
`OPTIONS` declares its options: the trainer checks the job's args against them before building.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from gpujobs.workloads import WorkloadOption
from trainer.workloads import Workload

OPTIONS = [
    WorkloadOption("features", "int", 8, "Input features.", 1, 65_536),
    WorkloadOption("samples", "int", 1024, "Rows of the synthetic dataset.", 1, 10_000_000),
    WorkloadOption("data_seed", "int", 0, "Seed of the synthetic dataset.", 0, 2**32 - 1),
]


def build(args: dict[str, Any]) -> Workload:
    """`args` arrive checked against OPTIONS, defaults filled in."""
    features: int = args["features"]
    samples: int = args["samples"]
    generator = torch.Generator().manual_seed(args["data_seed"])
    true_weight = torch.randn(features, 1, generator=generator)
    x = torch.randn(samples, features, generator=generator)
    y = x @ true_weight + 0.01 * torch.randn(samples, 1, generator=generator)

    def loss_fn(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        return F.mse_loss(model(inputs), targets)

    return Workload(
        model=nn.Linear(features, 1), train_dataset=TensorDataset(x, y), loss_fn=loss_fn
    )

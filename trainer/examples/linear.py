"""A user workload in a dozen lines: linear regression on a fixed synthetic dataset.

Run it with `"workload": "trainer.examples.linear:build"` in the TrainerSpec.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from trainer.workloads import Workload


def build(args: dict[str, Any]) -> Workload:
    features = int(args.get("features", 8))
    samples = int(args.get("samples", 1024))
    generator = torch.Generator().manual_seed(int(args.get("data_seed", 0)))
    true_weight = torch.randn(features, 1, generator=generator)
    x = torch.randn(samples, features, generator=generator)
    y = x @ true_weight + 0.01 * torch.randn(samples, 1, generator=generator)

    def loss_fn(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        return F.mse_loss(model(inputs), targets)

    return Workload(
        model=nn.Linear(features, 1), train_dataset=TensorDataset(x, y), loss_fn=loss_fn
    )

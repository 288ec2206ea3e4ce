"""Optimizer and learning-rate schedule: AdamW with linear warmup and cosine decay to 10%."""

from __future__ import annotations

import math

import torch
from torch import nn


def make_optimizer(model: nn.Module, lr: float, device: torch.device) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        model.parameters(),
        lr=lr,
        betas=(0.9, 0.95),
        weight_decay=0.01,
        fused=device.type == "cuda",
    )


def lr_factor(step: int, total_steps: int) -> float:
    warmup = max(1, min(100, total_steps // 20))
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def make_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps))

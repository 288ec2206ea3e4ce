"""What the trainer trains: a model, its training data and its loss.

Built-ins are named (`gpt`, `resnet`); anything else is a user module `pkg.mod:build`, a
function taking the workload options (TrainerSpec.args) and returning a Workload.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from trainer.config import ConfigError

LossFn = Callable[[nn.Module, Any], torch.Tensor]


@dataclass
class Workload:
    """`loss_fn(model, batch)` runs the forward pass and returns the scalar loss. `model` is
    the module as training sees it (wrapped in DistributedDataParallel under torchrun), and
    `batch` is what the DataLoader yields, already on the device.

    `train_dataset[i]` must depend on `i` only (no unseeded randomness) for resume to be exact.
    `set_grad_checkpointing(on)` is required only if the job asks for gradient checkpointing.
    """

    model: nn.Module
    train_dataset: Dataset[Any]
    loss_fn: LossFn
    collate_fn: Callable[[list[Any]], Any] | None = None
    set_grad_checkpointing: Callable[[bool], None] | None = None


Builder = Callable[[dict[str, Any]], Workload]


def _builtin(name: str) -> Builder | None:
    if name == "gpt":
        from trainer.workloads.gpt import build

        return build
    if name == "resnet":
        from trainer.workloads.resnet import build

        return build
    return None


def load_workload(name: str, args: dict[str, Any]) -> Workload:
    builder = _builtin(name) or _user_builder(name)
    try:
        workload = builder(dict(args))
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"workload {name!r}: {exc}") from exc
    if not isinstance(workload, Workload):
        raise ConfigError(
            f"workload {name!r}: the builder returned {type(workload).__name__}, "
            "expected trainer.workloads.Workload"
        )
    return workload


def _user_builder(name: str) -> Builder:
    module_name, sep, attr = name.partition(":")
    if not sep:
        raise ConfigError(
            f"unknown workload {name!r}: use a built-in (gpt, resnet) or a module `pkg.mod:build`"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"workload {name!r}: cannot import {module_name} ({exc})") from exc
    builder = getattr(module, attr, None)
    if not callable(builder):
        raise ConfigError(f"workload {name!r}: {module_name} has no function {attr}")
    return builder

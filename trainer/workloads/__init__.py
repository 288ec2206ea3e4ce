"""What the trainer trains: a model, its training data and its loss.

Built-ins are named (`gpt`, `resnet`); anything else is a module `pkg.mod:build` that the
operator allowed (RunConfig.allowed_workload_prefixes): a function taking the workload options
(TrainerSpec.args) and returning a Workload. The allowlist is checked before the module is
imported, so a job cannot run arbitrary code by naming it (`subprocess:getoutput`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from gpujobs.workloads import BUILTIN_WORKLOADS, OptionsError, WorkloadOption, parse_options
from gpujobs.workloads import refusal as workload_refusal
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


def check_allowed(name: str, allowed_prefixes: Sequence[str]) -> None:
    """Refuse a workload that is neither built in nor under an allowed prefix, before any import."""
    reason = workload_refusal(name, allowed_prefixes)
    if reason is not None:
        raise ConfigError(f"workload refused: {reason}")


def load_workload(
    name: str, args: dict[str, Any], *, allowed_prefixes: Sequence[str] = ()
) -> Workload:
    check_allowed(name, allowed_prefixes)
    builtin = _builtin(name) if name in BUILTIN_WORKLOADS else None
    builder = builtin or _user_builder(name)
    try:
        workload = builder(dict(args))
    except ConfigError:
        raise
    except OptionsError as exc:
        raise ConfigError(f"workload {name!r}: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"workload {name!r}: {exc}") from exc
    if not isinstance(workload, Workload):
        raise ConfigError(
            f"workload {name!r}: the builder returned {type(workload).__name__}, "
            "expected trainer.workloads.Workload"
        )
    return workload


def _user_builder(name: str) -> Builder:
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"workload {name!r}: cannot import {module_name} ({exc})") from exc
    builder = getattr(module, attr, None)
    if not callable(builder):
        raise ConfigError(f"workload {name!r}: {module_name} has no function {attr}")
    declared = getattr(module, "OPTIONS", None)
    if declared is None:
        return builder  # the operator's module: its options are not declared
    options = _declared_options(name, declared)

    def checked(args: dict[str, Any]) -> Workload:
        return builder(parse_options(options, args))

    return checked


def _declared_options(name: str, declared: Any) -> list[WorkloadOption]:
    if not isinstance(declared, list | tuple) or not all(
        isinstance(o, WorkloadOption) for o in declared
    ):
        raise ConfigError(
            f"workload {name!r}: its module's OPTIONS must be a list of "
            "gpujobs.workloads.WorkloadOption"
        )
    return list(declared)

"""Running under torchrun: process group from its environment, and the few agreements ranks
must reach every step (stop for preemption, take a timed checkpoint) so they never diverge."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None
    # Control messages travel over gloo even when gradients use NCCL: reading a flag back from
    # a CUDA tensor would make the host wait for the GPU every step.
    control_group: Any = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def agree_any(self, flags: list[bool]) -> list[bool]:
        """Each flag is true everywhere if it is true on any rank."""
        if not self.distributed:
            return flags
        tensor = torch.tensor([int(f) for f in flags], dtype=torch.int32)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.control_group)
        return [bool(v) for v in tensor.tolist()]

    def all_true(self, flag: bool) -> bool:
        if not self.distributed:
            return flag
        tensor = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=self.control_group)
        return bool(tensor.item())

    def broadcast(self, value: Any) -> Any:
        """Rank 0's value, on every rank."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.control_group)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self.control_group)

    def shutdown(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


def init_distributed() -> DistContext:
    """One process (no torchrun) or one rank of a torchrun job, from its environment."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size == 1:
        return DistContext(device=device)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(minutes=30))
    control = dist.new_group(backend="gloo") if backend == "nccl" else None
    return DistContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        device=device,
        backend=backend,
        control_group=control,
    )

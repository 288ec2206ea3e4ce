"""A deterministic distributed batch sampler whose position is part of the checkpoint.

Epoch `e` visits the dataset in the order of a permutation seeded by (seed, e). Global
micro-batch `k` is the slice [k*B*W, (k+1)*B*W) of that order and rank `r` takes its B items
from it. The position is just (epoch, global micro-batches consumed), so a resumed run restarts
mid-epoch at the very next batch, and even a different world size can pick up at the same sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass
class DataPosition:
    epoch: int = 0
    batches: int = 0  # global micro-batches consumed in this epoch
    samples: int = 0  # samples consumed in this epoch, across all ranks

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches": self.batches, "samples": self.samples}


class ResumableSampler:
    def __init__(
        self,
        dataset_len: int,
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        shuffle: bool = True,
    ) -> None:
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.batches_per_epoch = dataset_len // (batch_size * world_size)
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"the dataset has {dataset_len} items, fewer than one batch of "
                f"{batch_size} x {world_size} ranks"
            )
        self.epoch = 0
        self.start = 0

    def set_position(self, epoch: int, batches: int) -> None:
        self.epoch = epoch
        self.start = batches

    def restore(self, state: dict[str, int], *, batch_size: int, world_size: int) -> DataPosition:
        """Adopt a saved position; a different batch or world size resumes at the same sample."""
        if batch_size == self.batch_size and world_size == self.world_size:
            batches = state["batches"]
        else:
            batches = state["samples"] // (self.batch_size * self.world_size)
        epoch = state["epoch"]
        if batches >= self.batches_per_epoch:
            epoch, batches = epoch + 1, 0
        self.set_position(epoch, batches)
        return DataPosition(epoch, batches, batches * self.batch_size * self.world_size)

    def order(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.dataset_len)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.dataset_len, generator=generator)

    def __iter__(self) -> Iterator[list[int]]:
        order = self.order(self.epoch)
        global_batch = self.batch_size * self.world_size
        for k in range(self.start, self.batches_per_epoch):
            first = k * global_batch + self.rank * self.batch_size
            yield order[first : first + self.batch_size].tolist()

    def __len__(self) -> int:
        return self.batches_per_epoch - self.start

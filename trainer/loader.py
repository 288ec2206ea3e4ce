"""The input pipeline: a DataLoader over the resumable sampler, and the stream of batches the
training loop pulls from it (position, epoch rollover, time spent waiting, copy to device).

Exact resume needs each item to be a deterministic function of its index (the built-in datasets
are); worker processes then cannot change what a batch contains, only when it is ready.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from gpujobs.spec import DataLoaderSpec
from trainer.sampler import DataPosition, ResumableSampler


def _outside_preemption_notice(_worker_id: int) -> None:
    # The notice may be sent to the whole process group; workers must keep serving batches until
    # the trainer has finished its step and saved, so they leave the group. (Ignoring SIGTERM
    # instead would make them immune to the DataLoader's own shutdown.) A worker whose trainer
    # dies exits by itself: the DataLoader's watchdog notices the parent is gone.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


def build_loader(
    dataset: Dataset[Any],
    sampler: ResumableSampler,
    spec: DataLoaderSpec,
    *,
    device: torch.device,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> DataLoader[Any]:
    workers = spec.num_workers
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=workers,
        collate_fn=collate_fn,
        pin_memory=spec.pin_memory and device.type == "cuda",
        prefetch_factor=spec.prefetch_factor if workers > 0 else None,
        persistent_workers=spec.persistent_workers and workers > 0,
        worker_init_fn=_outside_preemption_notice if workers > 0 else None,
        # A private generator: creating an iterator must not draw from the global RNG, which
        # the training step (dropout, ...) owns and the checkpoint restores.
        generator=torch.Generator(),
    )


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        moved = [to_device(v, device) for v in batch]
        return type(batch)(moved) if isinstance(batch, tuple) else moved
    return batch


class BatchStream:
    """Batches in training order, resumable at any micro-batch."""

    def __init__(
        self, loader: DataLoader[Any], sampler: ResumableSampler, device: torch.device, seed: int
    ) -> None:
        self.loader = loader
        self.sampler = sampler
        self.device = device
        self.seed = seed
        self.position = DataPosition()
        self.wait_s = 0.0
        self._iterator: Any = None

    def seek(self, position: DataPosition) -> None:
        self.position = position
        self.sampler.set_position(position.epoch, position.batches)
        self._iterator = None

    def _open(self) -> None:
        pos = self.position
        assert self.loader.generator is not None
        self.loader.generator.manual_seed(
            (self.seed * 1_000_003 + pos.epoch) * 65_537 + pos.batches
        )
        self.sampler.set_position(pos.epoch, pos.batches)
        self._iterator = iter(self.loader)

    def close(self) -> None:
        """Stop the worker processes now, while the interpreter can still do it cleanly."""
        iterator, self._iterator = self._iterator, None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    def next(self) -> Any:
        start = time.perf_counter()
        if self._iterator is None:
            self._open()
        try:
            batch = next(self._iterator)
        except StopIteration:
            self.position = DataPosition(epoch=self.position.epoch + 1)
            self._open()
            batch = next(self._iterator)
        self.position.batches += 1
        self.position.samples += self.sampler.batch_size * self.sampler.world_size
        batch = to_device(batch, self.device)
        self.wait_s += time.perf_counter() - start
        return batch

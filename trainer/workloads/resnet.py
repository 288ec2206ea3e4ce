"""`resnet`: a small ResNet on a deterministic synthetic image dataset.

Each class has a fixed random template; an image is its class's template plus noise, both drawn
from generators seeded by the item's index, so the data needs no download, has a learnable
signal, and item i is the same on every machine.

GroupNorm instead of BatchNorm: no running statistics, so gradient checkpointing (which runs a
block's forward twice) and DistributedDataParallel buffers leave nothing to reconcile.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import Dataset

from gpujobs.workloads import RESNET as DECLARED
from trainer.workloads import Workload


def norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(8, channels), channels)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.n1 = norm(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.n2 = norm(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), norm(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.n1(self.conv1(x)))
        return F.relu(self.n2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, *, width: int, blocks_per_stage: int, stages: int, num_classes: int) -> None:
        super().__init__()
        self.grad_checkpointing = False
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), norm(width), nn.ReLU())
        blocks: list[nn.Module] = []
        c = width
        for stage in range(stages):
            c_out = width * 2**stage
            for i in range(blocks_per_stage):
                blocks.append(BasicBlock(c, c_out, 2 if stage > 0 and i == 0 else 1))
                c = c_out
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            if self.grad_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SyntheticImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, *, size: int, image_size: int, num_classes: int, seed: int) -> None:
        self.size = size
        self.image_size = image_size
        self.num_classes = num_classes
        self.seed = seed
        generator = torch.Generator().manual_seed(seed)
        self.templates = torch.randn(num_classes, 3, image_size, image_size, generator=generator)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + i + 1)
        label = int(torch.randint(self.num_classes, (), generator=generator))
        noise = torch.randn(3, self.image_size, self.image_size, generator=generator)
        return self.templates[label] + 1.5 * noise, torch.tensor(label)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels)


def build(args: dict[str, Any]) -> Workload:
    """Options, their defaults and bounds: `gpujobs.workloads.RESNET` (what the API checks too)."""
    opts = DECLARED.parse(args)
    width: int = opts["width"]
    blocks_per_stage: int = opts["blocks_per_stage"]
    stages: int = opts["stages"]
    num_classes: int = opts["num_classes"]
    image_size: int = opts["image_size"]
    size: int = opts["dataset_size"]
    data_seed: int = opts["data_seed"]
    model = ResNet(
        width=width, blocks_per_stage=blocks_per_stage, stages=stages, num_classes=num_classes
    )

    def set_grad_checkpointing(on: bool) -> None:
        model.grad_checkpointing = on

    dataset = SyntheticImages(
        size=size, image_size=image_size, num_classes=num_classes, seed=data_seed
    )
    return Workload(
        model=model,
        train_dataset=dataset,
        loss_fn=loss_fn,
        set_grad_checkpointing=set_grad_checkpointing,
    )

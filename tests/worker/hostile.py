"""A hostile workload: what a team's code would try once it runs on the server's machine.

It takes no options (nothing to validate). The test tells it where to look through `spec.env`
(`HOSTILE_TARGETS`, a JSON object: label -> [action, path]), as a real attacker would guess or
derive the paths (its working directory sits inside the launcher's root). Every outcome goes
into `hostile-<rank>.json` in its working directory and onto its log, and then it trains a
linear model for real, so the attempt (and its checkpoints) must still work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from trainer.workloads import Workload


def attempt(action: str, path: str) -> str:
    """'ok' when the action worked, else the name of the error that stopped it."""
    try:
        if action == "read":
            with open(path, "rb") as file:
                file.read(64)
        elif action == "list":
            os.listdir(path)
        elif action == "write":
            with open(path, "w") as file:
                file.write("0")
        elif action == "signal":
            os.kill(int(path), 0)
        else:
            return f"unknown action {action}"
    except OSError as exc:
        return type(exc).__name__
    return "ok"


def probe() -> dict[str, Any]:
    targets: dict[str, list[str]] = json.loads(os.environ.get("HOSTILE_TARGETS", "{}"))
    return {
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        # The kernel's copy, in case something edited os.environ after exec.
        "proc_environ": Path("/proc/self/environ").read_bytes().decode(errors="replace"),
        "outcomes": {label: attempt(action, path) for label, (action, path) in targets.items()},
    }


def build(args: dict[str, Any]) -> Workload:
    report = probe()
    rank = os.environ.get("RANK", "0")
    text = json.dumps(report, sort_keys=True)
    Path(f"hostile-{rank}.json").write_text(text)
    print(f"HOSTILE {text}", flush=True)
    return linear()


def linear() -> Workload:
    """A linear model on 64 fixed samples: real training, in no time."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)

    def loss_fn(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        return F.mse_loss(model(inputs), targets)

    return Workload(model=nn.Linear(4, 1), train_dataset=TensorDataset(x, y), loss_fn=loss_fn)

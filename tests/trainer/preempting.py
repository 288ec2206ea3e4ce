"""A test workload that receives the preemption notice (SIGTERM to itself) on a chosen step."""

from __future__ import annotations

import signal
from typing import Any

from trainer.workloads import Workload
from trainer.workloads.gpt import build as build_gpt


def build(args: dict[str, Any]) -> Workload:
    args = dict(args)
    notice_at_call = int(args.pop("notice_at_call"))
    workload = build_gpt(args)
    calls = 0
    inner = workload.loss_fn

    def loss_fn(model: Any, batch: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == notice_at_call:
            signal.raise_signal(signal.SIGTERM)
        return inner(model, batch)

    workload.loss_fn = loss_fn
    return workload

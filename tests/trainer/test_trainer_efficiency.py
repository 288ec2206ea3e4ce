"""Mixed precision, gradient accumulation and gradient checkpointing do what they claim."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from gpujobs.spec import AmpDtype
from tests.trainer.trainer_runs import TINY_GPT, run_config, run_in_process
from trainer.checkpoint import load_latest
from trainer.precision import choose_precision
from trainer.workloads import load_workload


def test_bf16_autocast_on_cpu_computes_in_bf16() -> None:
    workload = load_workload("gpt", TINY_GPT)
    seen: list[torch.dtype] = []
    workload.model.blocks[0].mlp[0].register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    precision = choose_precision(AmpDtype.BF16, torch.device("cpu"))
    batch = tuple(t.unsqueeze(0) for t in workload.train_dataset[0])
    with precision.autocast():
        loss = workload.loss_fn(workload.model, batch)
    workload.model(batch[0])
    assert seen == [torch.bfloat16, torch.float32]
    assert loss.dtype == torch.float32  # cross-entropy runs in fp32 under autocast
    assert not precision.scaler.is_enabled()


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_runs_train_on_cpu(tmp_path: Path, amp: str) -> None:
    result, records = run_in_process(run_config(str(tmp_path / "ckpt"), steps=6, amp=amp))
    assert result.exit_code == 0
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and all(math.isfinite(x) for x in losses)
    state = load_latest(str(tmp_path / "ckpt"))
    assert state is not None
    assert all(t.dtype == torch.float32 for t in state.shared["model"].values())
    assert bool(state.shared["scaler"]) == (amp == "fp16")  # loss scaling only for fp16


def test_accumulating_k_micro_batches_equals_one_k_times_batch(tmp_path: Path) -> None:
    common = {"steps": 3, "max_grad_norm": 0.5, "learning_rate": 1e-3}
    run_in_process(run_config(str(tmp_path / "one"), batch_size=8, **common))
    run_in_process(run_config(str(tmp_path / "four"), batch_size=2, grad_accum_steps=4, **common))
    one, four = load_latest(str(tmp_path / "one")), load_latest(str(tmp_path / "four"))
    assert one is not None and four is not None
    for name, weight in one.shared["model"].items():
        torch.testing.assert_close(four.shared["model"][name], weight, rtol=1e-4, atol=1e-5)


def gradients(workload_name: str, args: dict, checkpointing: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    workload = load_workload(workload_name, args)
    assert workload.set_grad_checkpointing is not None
    workload.set_grad_checkpointing(checkpointing)
    model: nn.Module = workload.model.train()
    items = [workload.train_dataset[i] for i in range(4)]
    batch = tuple(torch.stack(parts) for parts in zip(*items, strict=True))
    torch.manual_seed(1)  # the same dropout masks; checkpointing replays them on recompute
    workload.loss_fn(model, batch).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    ("name", "args"),
    [("gpt", {**TINY_GPT, "dropout": 0.1}), ("resnet", {"width": 8, "image_size": 8})],
)
def test_gradient_checkpointing_gives_the_same_gradients(name: str, args: dict) -> None:
    plain, checkpointed = gradients(name, args, False), gradients(name, args, True)
    assert plain.keys() == checkpointed.keys()
    for key, grad in plain.items():
        torch.testing.assert_close(checkpointed[key], grad, rtol=1e-5, atol=1e-7)


def test_resnet_trains_with_checkpointing_and_workers(tmp_path: Path) -> None:
    config = run_config(
        str(tmp_path / "ckpt"),
        workload="resnet",
        steps=4,
        grad_checkpointing=True,
        dataloader={"num_workers": 2, "prefetch_factor": 2, "persistent_workers": False},
        args={"width": 8, "image_size": 8, "dataset_size": 256},
    )
    result, _ = run_in_process(config)
    assert result.exit_code == 0 and result.step == 4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("amp", ["bf16", "fp16", "off"])
def test_trains_on_cuda(tmp_path: Path, amp: str) -> None:
    config = run_config(
        str(tmp_path / "ckpt"),
        steps=10,
        amp=amp,
        grad_checkpointing=True,
        dataloader={"num_workers": 2, "pin_memory": True},
    )
    result, records = run_in_process(config)
    assert result.exit_code == 0
    assert all(math.isfinite(r["loss"]) for r in records if "loss" in r)

"""Built-in and user workloads, and the errors a user sees when one is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.trainer_runs import run_config, run_in_process
from trainer.config import ConfigError
from trainer.workloads import Workload, load_workload
from trainer.workloads.gpt import corpus_files, stdlib_dir


def test_user_workload_from_a_module(tmp_path: Path) -> None:
    config = run_config(
        str(tmp_path / "ckpt"),
        workload="trainer.examples.linear:build",
        steps=60,
        batch_size=16,
        learning_rate=0.05,
        args={"features": 4},
    )
    result, records = run_in_process(config)
    assert result.exit_code == 0
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] / 10


def test_gpt_reads_the_stdlib_in_a_fixed_order_or_the_given_corpus(tmp_path: Path) -> None:
    files = corpus_files([stdlib_dir()], "*.py")
    assert files == sorted(files) and len(files) > 100
    assert not any("site-packages" in f.parts for f in files)
    (tmp_path / "a.txt").write_text("hello world " * 100)
    workload = load_workload("gpt", {"corpus": str(tmp_path / "a.txt"), "block_size": 8})
    x, y = workload.train_dataset[0]
    assert bytes(x.tolist()) == b"hello wo" and bytes(y.tolist()) == b"ello wor"


def test_resnet_data_is_deterministic_and_learnable() -> None:
    a = load_workload("resnet", {"image_size": 8})
    b = load_workload("resnet", {"image_size": 8})
    for i in (0, 17, 4095):
        assert all(
            torch.equal(p, q) for p, q in zip(a.train_dataset[i], b.train_dataset[i], strict=True)
        )
    labels = {int(a.train_dataset[i][1]) for i in range(200)}
    assert labels == set(range(10))


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("bert", {}, "unknown workload 'bert'"),
        ("no_such_pkg.mod:build", {}, "cannot import no_such_pkg.mod"),
        ("trainer.examples.linear:missing", {}, "has no function missing"),
        ("gpt", {"n_layers": 3}, "unknown option(s) n_layers"),
        ("gpt", {"n_layer": "3"}, "option n_layer must be int"),
        ("gpt", {"n_embd": 30, "n_head": 4}, "must be a multiple of n_head"),
        ("gpt", {"corpus": "/nonexistent/corpus"}, "does not exist"),
        ("tests.trainer.test_trainer_workloads:not_a_workload", {}, "expected trainer.workloads"),
    ],
)
def test_workload_errors_are_clear(name: str, args: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load_workload(name, args)
    assert message in str(info.value)


def not_a_workload(args: dict) -> object:
    return {"model": None}


def test_grad_checkpointing_needs_support_from_the_workload(tmp_path: Path) -> None:
    config = run_config(
        str(tmp_path / "ckpt"), workload="trainer.examples.linear:build", grad_checkpointing=True
    )
    with pytest.raises(ConfigError, match="does not support grad_checkpointing"):
        run_in_process(config)


def test_workload_type_is_a_dataclass() -> None:
    workload = load_workload("trainer.examples.linear:build", {})
    assert isinstance(workload, Workload)

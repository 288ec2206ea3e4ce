"""Built-in and user workloads, what a job may run, and the errors a user sees when one is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from gpujobs.runtime import EXIT_CONFIG_ERROR
from gpujobs.workloads import BUILTIN_WORKLOADS
from tests.trainer.trainer_runs import REPO, TINY_GPT, run_config, run_in_process
from trainer.config import ConfigError
from trainer.workloads import Workload, _builtin, load_workload
from trainer.workloads.gpt import corpus_files, stdlib_dir

EXAMPLES = ["trainer.examples"]


def test_user_workload_from_an_allowed_module(tmp_path: Path) -> None:
    config = run_config(
        str(tmp_path / "ckpt"),
        workload="trainer.examples.linear:build",
        steps=60,
        batch_size=16,
        learning_rate=0.05,
        args={"features": 4},
    )
    result, records = run_in_process({**config, "allowed_workload_prefixes": EXAMPLES})
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


def test_every_declared_builtin_has_a_builder_and_its_defaults_build() -> None:
    assert {name for name in BUILTIN_WORKLOADS if _builtin(name) is not None} == {"gpt", "resnet"}
    # The declared defaults are what the builder uses: a model shaped by them.
    gpt = load_workload("gpt", {"corpus_bytes": 10_000})
    declared = {o.name: o.default for o in BUILTIN_WORKLOADS["gpt"].options}
    assert len(gpt.model.blocks) == declared["n_layer"]  # type: ignore[arg-type]
    assert gpt.model.wte.embedding_dim == declared["n_embd"]
    resnet = load_workload("resnet", {"dataset_size": 3})
    assert len(resnet.train_dataset) == 3  # type: ignore[arg-type]


LINEAR = "trainer.examples.linear:build"


@pytest.mark.parametrize(
    ("name", "args", "prefixes", "message"),
    [
        ("bert", {}, [], "unknown workload 'bert'"),
        ("subprocess:getoutput", {}, [], "module 'subprocess' is not allowed"),
        ("trainer.examples.linear:build", {}, [], "not allowed"),
        ("trainer.examplesevil:build", {}, EXAMPLES, "not allowed"),
        ("trainer.examples.no_such_mod:build", {}, EXAMPLES, "cannot import"),
        ("trainer.examples.linear:missing", {}, EXAMPLES, "has no function missing"),
        (LINEAR, {"featurs": 3}, EXAMPLES, "option featurs: unknown option"),
        (LINEAR, {"features": 2.5}, EXAMPLES, "option features: must be an integer"),
        ("gpt", {"n_layers": 3}, [], "option n_layers: unknown option"),
        ("gpt", {"n_layer": "3"}, [], "option n_layer: must be an integer"),
        ("gpt", {"n_layer": True}, [], "option n_layer: must be an integer"),
        ("gpt", {"dropout": float("nan")}, [], "option dropout: must be a finite number"),
        ("gpt", {"n_layer": 0}, [], "option n_layer: must be >= 1"),
        ("gpt", {"n_embd": 30, "n_head": 4}, [], "must be a multiple of n_head"),
        ("gpt", {"corpus": "/nonexistent/corpus"}, [], "does not exist"),
        ("tests.trainer.test_trainer_workloads:not_a_workload", {}, ["tests"], "expected trainer"),
        ("tests.trainer.bad_options:build", {}, ["tests.trainer"], "OPTIONS must be"),
    ],
)
def test_workload_errors_are_clear(
    name: str, args: dict[str, Any], prefixes: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_workload(name, args, allowed_prefixes=prefixes)
    assert message in str(info.value)


def not_a_workload(args: dict[str, Any]) -> object:
    return {"model": None}


def test_grad_checkpointing_needs_support_from_the_workload(tmp_path: Path) -> None:
    config = run_config(str(tmp_path / "ckpt"), workload=LINEAR, grad_checkpointing=True, args={})
    with pytest.raises(ConfigError, match="does not support grad_checkpointing"):
        run_in_process({**config, "allowed_workload_prefixes": EXAMPLES})


def test_workload_type_is_a_dataclass() -> None:
    workload = load_workload(LINEAR, {}, allowed_prefixes=EXAMPLES)
    assert isinstance(workload, Workload)


def _run_trainer(config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )


def test_the_trainer_refuses_a_shell_through_a_workload_before_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack of issue 9: `subprocess:getoutput` with an arg that becomes a shell command."""
    marker = tmp_path / "pwned"
    args = {"touch pwned": True}  # the trainer runs in tmp_path: the marker lands there
    config = run_config(str(tmp_path / "ckpt"), workload="subprocess:getoutput", args=args)
    # Even an operator who allows other modules does not allow this one.
    done = _run_trainer({**config, "allowed_workload_prefixes": ["acme.models"]}, tmp_path)
    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr
    assert "module 'subprocess' is not allowed" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()
    # What the builder call `getoutput(args)` would have done: the keys become a shell command.
    monkeypatch.chdir(tmp_path)
    subprocess.getoutput(args)  # type: ignore[arg-type]  # exactly what the old trainer called
    assert marker.exists()


def test_the_trainer_refuses_args_an_allowed_module_does_not_declare(tmp_path: Path) -> None:
    config = run_config(str(tmp_path / "ckpt"), workload=LINEAR, args={"features": "4"})
    done = _run_trainer({**config, "allowed_workload_prefixes": EXAMPLES}, tmp_path)
    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr
    assert "trainer.args.features" not in done.stderr  # checked where it is imported, not here
    assert "option features: must be an integer" in done.stderr


def test_the_trainer_refuses_builtin_options_at_start(tmp_path: Path) -> None:
    config = run_config(str(tmp_path / "ckpt"), args={**TINY_GPT, "n_layers": 3})
    done = _run_trainer(config, tmp_path)
    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr
    assert "trainer.args.n_layers: unknown option" in done.stderr

"""`trainer.deterministic` and `trainer.compile` on a CPU: what the GPU path depends on.

On a GPU, deterministic kernels are what make a resumed run bitwise equal to an uninterrupted one
(benchmarks/gpu_e2e.py measures it there); here: the trainer turns them on (and sets cuBLAS's
workspace before any CUDA work), a preempted deterministic run still ends bitwise equal, and a
compiled model trains, saves the same state keys as an uncompiled one and resumes either way.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from gpujobs.runtime import EXIT_PREEMPTED
from tests.trainer.trainer_runs import TrainerProcess, assert_same_weights, run_config
from trainer import determinism
from trainer.checkpoint import load_latest

STEPS = 20
TINIEST = {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 8, "corpus_bytes": 20_000}


def final(uri: str) -> dict[str, torch.Tensor]:
    state = load_latest(uri)
    assert state is not None and state.step == STEPS
    return state.shared["model"]


def test_apply_sets_what_cuda_reads_before_its_first_matmul() -> None:
    env: dict[str, str] = {}
    before = torch.are_deterministic_algorithms_enabled()
    try:
        determinism.apply(False, env)
        assert env == {} and torch.are_deterministic_algorithms_enabled() == before

        determinism.apply(True, env)
        assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert not torch.backends.cuda.mem_efficient_sdp_enabled()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.use_deterministic_algorithms(before)
        torch.backends.cudnn.deterministic = False
        torch.backends.cuda.enable_mem_efficient_sdp(True)
        torch.backends.cuda.enable_cudnn_sdp(True)


def test_a_preempted_deterministic_run_ends_bitwise_equal(tmp_path: Path) -> None:
    spec = {"steps": STEPS, "deterministic": True, "args": {"dropout": 0.1}}
    whole = TrainerProcess(run_config(str(tmp_path / "whole"), **spec), tmp_path / "w")
    assert whole.wait() == 0, whole.stderr()
    (start,) = whole.events("start")
    assert start["deterministic"] is True

    first = TrainerProcess(run_config(str(tmp_path / "cut"), **spec), tmp_path / "c1")
    first.wait_for_step(8)
    first.interrupt(signal.SIGTERM)
    assert first.wait() == EXIT_PREEMPTED, first.stderr()
    second = TrainerProcess(run_config(str(tmp_path / "cut"), **spec), tmp_path / "c2")
    assert second.wait() == 0, second.stderr()
    assert second.events("resume")

    assert_same_weights(final(str(tmp_path / "whole")), final(str(tmp_path / "cut")))


@pytest.mark.timeout(600)
def test_a_compiled_model_trains_and_checkpoints_what_an_uncompiled_one_resumes(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ckpt")
    half = {"steps": STEPS, "checkpoint": {"every_steps": 10, "keep_last": 2}, "args": TINIEST}
    # Inductor builds C++ for the CPU: minutes for the usual tiny GPT on 2 cores, less for this.
    compiled = TrainerProcess(run_config(uri, **half, compile=True), tmp_path / "a")
    compiled.wait_for_step(10, timeout=420)
    compiled.interrupt(signal.SIGTERM)
    assert compiled.wait() == EXIT_PREEMPTED, compiled.stderr()
    (start,) = compiled.events("start")
    assert start["compiled"] is True
    saved = load_latest(uri)
    assert saved is not None
    assert not any("_orig_mod" in key for key in saved.shared["model"])

    resumed = TrainerProcess(run_config(uri, **half), tmp_path / "b")
    assert resumed.wait() == 0, resumed.stderr()
    assert resumed.events("resume")
    assert set(final(uri)) == set(saved.shared["model"])

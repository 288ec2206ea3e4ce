"""A run interrupted any number of times (SIGTERM or SIGKILL, at varying steps) and resumed ends
with weights bitwise identical to a run that never was: alone and under torchrun (2 gloo ranks),
with checkpoints on a local directory and on S3."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from devstack.s3server import S3Server
from gpujobs.runtime import EXIT_PREEMPTED
from tests.trainer.trainer_runs import TrainerProcess, assert_same_weights, run_config
from trainer.checkpoint import latest_complete_step, load_latest

STEPS = 36
# Dropout draws from the RNG, accumulation exercises no_sync, workers prefetch ahead of the
# position, and checkpoints every 7 steps make each interruption redo some steps.
SPEC: dict[str, Any] = {
    "steps": STEPS,
    "grad_accum_steps": 2,
    "checkpoint": {"every_steps": 7, "keep_last": 2},
    "dataloader": {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True},
}
SPEC_ARGS = {"dropout": 0.1}


def config(uri: str, s3: S3Server | None = None) -> dict[str, Any]:
    cfg = run_config(uri, **SPEC)
    cfg["trainer"]["args"].update(SPEC_ARGS)
    if s3 is not None:
        cfg["s3_endpoint_url"] = s3.endpoint_url
    return cfg


def final_weights(uri: str, s3: S3Server | None = None) -> dict[str, torch.Tensor]:
    state = load_latest(uri, endpoint_url=s3.endpoint_url if s3 else None)
    assert state is not None and state.step == STEPS
    return state.shared["model"]


_references: dict[int, dict[str, torch.Tensor]] = {}


def reference(nproc: int, tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The uninterrupted run's final weights, computed once per world size."""
    if nproc not in _references:
        workdir = tmp_path_factory.mktemp(f"reference-{nproc}")
        uri = str(workdir / "ckpt")
        run = TrainerProcess(config(uri), workdir, nproc=nproc)
        assert run.wait() == 0, run.stderr()
        _references[nproc] = final_weights(uri)
    return _references[nproc]


def interrupted_run(
    uri: str,
    workdir: Path,
    *,
    nproc: int,
    interruptions: list[tuple[signal.Signals, int]],
    s3: S3Server | None = None,
) -> None:
    env = s3.env() if s3 else None
    for sig, at_step in interruptions:
        before = latest_complete_step(uri, endpoint_url=s3.endpoint_url if s3 else None)
        run = TrainerProcess(config(uri, s3), workdir, nproc=nproc, env=env)
        run.wait_for_step(at_step)
        run.interrupt(sig)
        code = run.wait()
        if sig == signal.SIGTERM:
            preempted = run.events("preempted")
            assert preempted and preempted[0]["saved"], run.stderr()
            stopped_at = preempted[0]["step"]
            assert stopped_at >= at_step
            assert stopped_at < STEPS
            assert latest_complete_step(uri, endpoint_url=s3.endpoint_url if s3 else None) == (
                stopped_at
            )
            if nproc == 1:
                assert code == EXIT_PREEMPTED, run.stderr()
        else:
            assert code == -signal.SIGKILL
            # Every rank and worker is gone, not only torchrun: nothing trains on, or writes
            # checkpoints, while the next attempt resumes.
            assert run.processes() == []
        if before is not None:
            assert run.events("resume")[0]["step"] == before
    final = TrainerProcess(config(uri, s3), workdir, nproc=nproc, env=env)
    assert final.wait() == 0, final.stderr()
    assert final.events("resume"), "the last run must resume, not start over"
    assert final.events("done")[0]["step"] == STEPS


def test_single_process_local(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    uri = str(tmp_path / "ckpt")
    interrupted_run(
        uri,
        tmp_path,
        nproc=1,
        interruptions=[(signal.SIGTERM, 3), (signal.SIGKILL, 12), (signal.SIGTERM, 22)],
    )
    assert_same_weights(final_weights(uri), reference(1, tmp_path_factory))


@pytest.mark.s3
def test_single_process_s3(
    s3_env: S3Server, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    uri = "s3://exact-resume/single"
    interrupted_run(
        uri,
        tmp_path,
        nproc=1,
        s3=s3_env,
        interruptions=[(signal.SIGKILL, 9), (signal.SIGTERM, 17)],
    )
    assert_same_weights(final_weights(uri, s3_env), reference(1, tmp_path_factory))


def test_two_ranks_local(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    uri = str(tmp_path / "ckpt")
    interrupted_run(
        uri,
        tmp_path,
        nproc=2,
        interruptions=[(signal.SIGTERM, 5), (signal.SIGKILL, 16)],
    )
    assert_same_weights(final_weights(uri), reference(2, tmp_path_factory))


@pytest.mark.s3
def test_two_ranks_s3(
    s3_env: S3Server, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    uri = "s3://exact-resume/ddp"
    interrupted_run(uri, tmp_path, nproc=2, s3=s3_env, interruptions=[(signal.SIGTERM, 10)])
    assert_same_weights(final_weights(uri, s3_env), reference(2, tmp_path_factory))

"""Make-before-break end to end: a job on on-demand is handed to spot without stopping.

Real PostgreSQL, Redis, SeaweedFS, a Celery worker and beat, the local launcher and its spot
market replaying a trace (1 = spot available): spot is out when the job is submitted (it starts
on on-demand: no deadline to wait in) and comes back a few seconds later. A standby attempt gets
spot, its trainer builds and waits; the on-demand attempt checkpoints on the notice and the
standby continues from that step. The final weights must equal an uninterrupted run's, tensor
by tensor, whatever was killed on the way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from api.pricing.cost_model import LOCAL_RESTART_HOURS
from devstack.stack import ROOT, Stack, wait_for
from devstack.workloads import TINY_GPT, trainer_steps_per_second
from tests.trainer.trainer_runs import free_port
from trainer.checkpoint.reader import load_latest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

# Spot is out for the first 20 s, then stays.
TRACE = [0] * 4 + [1] * 500
TICK_S = 5.0


def trainer_spec(steps: int) -> dict[str, Any]:
    return {
        "workload": "gpt",
        "steps": steps,
        "batch_size": 8,
        "amp": "bf16",
        "seed": 11,
        "dataloader": {"num_workers": 0},
        "args": TINY_GPT,
    }


def submit(
    stack: Stack,
    tmp_path: Path,
    *,
    work_s: float,
    every_steps: int | None = None,
    gpus: int = 1,
) -> tuple[str, dict[str, Any]]:
    """A job of about `work_s` seconds of training on this machine, spot or on-demand, estimated
    at ten times that with a deadline that leaves no room to wait: placed on on-demand while
    spot is out. Once its trainer has measured its rate the deadline has slack again (ample, on
    a machine up to several times slower than measured here), and spot is back: a standby takes
    it over."""
    rate = trainer_steps_per_second(trainer_spec(steps=1), scratch=tmp_path)
    trainer = trainer_spec(steps=max(400, int(rate * work_s)))
    if every_steps is not None:
        trainer["checkpoint"] = {"every_steps": every_steps}
    estimated = 10 * work_s / 3600
    spec = {
        "name": "handover",
        "trainer": trainer,
        "capacity": {"types": ["spot", "on_demand"]},
        "resources": {"gpus_per_node": gpus},
        "estimated_hours": estimated,
        # the local launcher's restart (36 s) and 2 s: on-demand at once
        "deadline_hours": estimated + LOCAL_RESTART_HOURS + 2 / 3600,
    }
    return stack.submit(spec), trainer


def notes(stack: Stack, job_id: str) -> list[str]:
    """The job's events that change no status: standbys held and lost, handovers."""
    return [e["reason"] for e in stack.events(job_id) if e["from_status"] == e["to_status"]]


def note_seen(stack: Stack, job_id: str, start: str) -> Callable[[], bool]:
    return lambda: any(n.startswith(start) for n in notes(stack, job_id))


def assert_same_weights(stack: Stack, job_id: str, trainer: dict[str, Any], tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch, *, ranks: int = 1) -> None:  # fmt: skip
    """The job's final checkpoint against the same trainer run uninterrupted, as one process or
    as a gang of `ranks` (torchrun, as the local launcher starts one)."""
    reference = tmp_path / "reference"
    config = {"job_id": "reference", "trainer": trainer, "checkpoint_uri": str(reference)}
    (tmp_path / "reference.json").write_text(json.dumps(config))
    gang = [
        "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1", f"--master_port={free_port()}",
    ]  # fmt: skip
    run = subprocess.run(
        [sys.executable, *(gang if ranks > 1 else []), "-m", "trainer",
         "--config", str(tmp_path / "reference.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    for key, value in stack.s3.env().items():
        monkeypatch.setenv(key, value)
    ours, theirs = load_latest(stack.checkpoint_uri(job_id)), load_latest(str(reference))
    assert ours is not None and theirs is not None
    assert ours.step == theirs.step == trainer["steps"]
    for name, tensor in theirs.shared["model"].items():
        assert torch.equal(ours.shared["model"][name], tensor), name


def trainer_group(stack: Stack, attempt_id: str) -> int:
    """The process group of an attempt's trainer (the local launcher records it)."""
    pid_file = stack.home / "attempts" / attempt_id / "pid"
    pid = wait_for(
        lambda: pid_file.exists() and json.loads(pid_file.read_text())["pid"],
        timeout=60,
        what=f"attempt {attempt_id}'s trainer",
    )
    return int(pid)


def test_a_job_moves_from_on_demand_to_spot_with_no_lost_step(  # type: ignore[no-untyped-def]
    make_stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack: Stack = make_stack(trace=TRACE, tick_seconds=TICK_S)
    job_id, trainer = submit(stack, tmp_path, work_s=50)
    job = stack.wait_status(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=400)
    assert job["status"] == "SUCCEEDED", stack.diagnostics(job_id)

    attempts = stack.attempts(job_id)
    assert [(a["capacity_type"], a["end_reason"], a["standby"]) for a in attempts] == [
        ("on_demand", "handed_over", False),
        ("spot", "succeeded", False),
    ], stack.diagnostics(job_id)
    old, new = attempts
    # No step lost: the on-demand attempt checkpointed the step it stopped at, and the standby
    # continued from exactly that step.
    assert old["steps_lost"] == 0, stack.diagnostics(job_id)
    assert new["resume_from_step"] and new["resume_from_step"] > 0
    assert job["preemptions"] == 0 and job["restarts"] == 0
    assert all(a["cost"] > 0 for a in attempts)  # both billed, the overlap included
    said = notes(stack, job_id)
    assert any(n.startswith("standby on spot ") for n in said), said
    assert any(n.startswith("handover: attempt 1 checkpoints") for n in said), said
    handed = [n for n in said if n.startswith("handed over at step ")]
    assert handed == [
        f"handed over at step {new['resume_from_step']} from attempt 1 "
        f"(on-demand {old['zone']}) to attempt 2 (spot {new['zone']}), 0 steps lost; "
        + handed[0].split("0 steps lost; ")[1]
    ], said
    statuses = [e["to_status"] for e in stack.events(job_id) if e["from_status"] != e["to_status"]]
    assert statuses == ["PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED"]  # it never stopped
    assert_same_weights(stack, job_id, trainer, tmp_path, monkeypatch)


def test_a_gang_is_handed_over_as_a_whole(  # type: ignore[no-untyped-def]
    make_stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of two GPUs (the local launcher runs one machine: a torchrun of two ranks; on
    Kubernetes a gang of pods, tests/launchers/test_k8s_standby.py): the standby's ranks wait as
    one, its rank 0 asking for them, and take over from the step the on-demand ranks stopped
    at; the final weights are an uninterrupted two-rank run's."""
    stack: Stack = make_stack(trace=TRACE, tick_seconds=TICK_S)
    job_id, trainer = submit(stack, tmp_path, work_s=50, gpus=2)
    job = stack.wait_status(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=400)
    assert job["status"] == "SUCCEEDED", stack.diagnostics(job_id)
    attempts = stack.attempts(job_id)
    assert [(a["capacity_type"], a["end_reason"], a["gpu_count"]) for a in attempts] == [
        ("on_demand", "handed_over", 2),
        ("spot", "succeeded", 2),
    ], stack.diagnostics(job_id)
    old, new = attempts
    assert old["steps_lost"] == 0 and new["resume_from_step"], stack.diagnostics(job_id)
    assert job["preemptions"] == 0 and job["restarts"] == 0
    assert any(n.startswith("handed over at step ") for n in notes(stack, job_id))
    assert_same_weights(stack, job_id, trainer, tmp_path, monkeypatch, ranks=2)


@pytest.mark.timeout(720)  # two runs of 90 s of training, and the stack: 5 min here
def test_killed_standby_worker_and_old_attempt_lose_nothing(  # type: ignore[no-untyped-def]
    make_stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL of the standby while it waits, then, at the next handover, of the worker and of
    the attempt handing over while it checkpoints: the job still ends with one training attempt
    at a time and the weights of an uninterrupted run."""
    stack: Stack = make_stack(trace=TRACE, tick_seconds=TICK_S)
    # Checkpoints every 100 steps: the attempt killed at its handover loses at most those, and
    # has left one by then even where its trainer ran a tenth as fast as measured (a run beside
    # another trainer's start on two cores, with 250, had none: the standby began from step 0).
    job_id, trainer = submit(stack, tmp_path, work_s=90, every_steps=100)

    # 1. The first standby dies while it waits (killed the moment it is launched, long before
    # its trainer is built): it is closed, the job runs on on-demand.
    def standby(number: int) -> dict[str, Any] | None:
        found = [a for a in stack.attempts(job_id) if a["number"] == number]
        return found[0] if found else None

    first = wait_for(lambda: standby(2), timeout=120, what="a standby", every=0.05)
    assert first["standby"], stack.diagnostics(job_id)
    os.killpg(trainer_group(stack, first["id"]), signal.SIGKILL)
    wait_for(
        note_seen(stack, job_id, "standby attempt 2 on spot"),
        timeout=60,
        what="the lost standby on the job",
    )
    assert stack.job(job_id)["status"] == "RUNNING"

    # 2. The next standby: at its handover the worker and the old attempt are killed.
    wait_for(note_seen(stack, job_id, "handover: attempt 1 checkpoints"), timeout=180,
             what="a handover", every=0.05)  # fmt: skip
    stack.kill("worker")
    os.killpg(trainer_group(stack, stack.attempts(job_id)[0]["id"]), signal.SIGKILL)
    stack.start_worker()

    job = stack.wait_status(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=400)
    assert job["status"] == "SUCCEEDED", stack.diagnostics(job_id)
    attempts = stack.attempts(job_id)
    ends = [(a["number"], a["capacity_type"], a["end_reason"]) for a in attempts]
    assert ends[0] == (1, "on_demand", "handed_over"), ends
    assert ends[1] in {(2, "spot", "failed"), (2, "spot", "lost")}, ends
    assert ends[-1][1:] == ("spot", "succeeded"), ends
    # The second standby took over (promoted, not a standby any more), from the checkpoint the
    # killed attempt left, whatever steps it lost; the policy may move the job on from there
    # (more work left than planned), but never onto two attempts at once.
    assert ends[2][:2] == (3, "spot") and not attempts[2]["standby"], stack.diagnostics(job_id)
    assert attempts[2]["resume_from_step"] is not None, stack.diagnostics(job_id)
    assert all(a["ended_at"] for a in attempts), stack.diagnostics(job_id)
    said = notes(stack, job_id)
    assert any(n.startswith("handed over at step ") and "to attempt 3" in n for n in said), said
    assert_same_weights(stack, job_id, trainer, tmp_path, monkeypatch)

"""The trainer pod's PID 1 (`python -m trainer.supervisor`): the notice reaches every rank and the
pod's exit code says what the ranks did. Real processes: two gloo ranks of the real trainer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpujobs.runtime import EXIT_PREEMPTED, EXIT_PREEMPTED_NO_CHECKPOINT
from tests.trainer.trainer_runs import REPO, free_port, run_config
from trainer.checkpoint import load_latest
from trainer.supervisor import Layout, parse, pod_exit_code
from worker.launchers.base import LaunchRequest
from worker.launchers.kubernetes import KubernetesLauncherConfig
from worker.launchers.kubernetes.manifests import build_manifests


def supervisor(
    workdir: Path,
    rank_command: list[str],
    *,
    nproc: int = 2,
    grace_s: float = 60,
    stop_s: float = 5,
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer.supervisor",
            f"--nproc-per-node={nproc}",
            f"--master-port={free_port()}",
            f"--grace-s={grace_s}",
            f"--stop-s={stop_s}",
            "--",
            *rank_command,
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=(workdir / "stderr.log").open("wb"),
        text=True,
        # Its own group, so the test signals the supervisor alone, as the kubelet does PID 1.
        start_new_session=True,
    )


def test_sigterm_reaches_every_rank_and_the_pod_exits_75(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    config = run_config(uri, steps=400, checkpoint={"every_steps": 1000, "keep_last": 2})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    process = supervisor(tmp_path, [sys.executable, "-m", "trainer", "--config", str(path)])
    records = []
    try:
        assert process.stdout is not None
        for line in process.stdout:  # rank 0's JSON lines
            if line.startswith("{"):
                records.append(json.loads(line))
                if records[-1].get("step", 0) >= 3 and "event" not in records[-1]:
                    break
        else:
            pytest.fail(f"no progress: {(tmp_path / 'stderr.log').read_text()[-3000:]}")
        os.kill(process.pid, signal.SIGTERM)  # the notice, to PID 1 only
        records += [json.loads(line) for line in process.stdout if line.startswith("{")]
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    stderr = (tmp_path / "stderr.log").read_text()[-3000:]

    assert code == EXIT_PREEMPTED, stderr
    (preempted,) = [r for r in records if r.get("event") == "preempted"]
    # `saved` is agreed by every rank: each one's part of the checkpoint is in place.
    assert preempted["saved"] is True
    state = load_latest(uri)
    assert state is not None and state.step == preempted["step"] < 400
    assert state.world_size == 2 and sorted(state.ranks) == [0, 1]


RANK_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    rank = int(os.environ["RANK"])
    behaviour = sys.argv[1].split(",")[rank]
    def on_term(*_):
        if behaviour == "ignore":
            return
        sys.exit(75 if behaviour == "save" else 76)
    signal.signal(signal.SIGTERM, on_term)
    # One write: print() writes the text and the newline apart, and two ranks share the pipe.
    os.write(1, f"rank {rank} world {os.environ['WORLD_SIZE']} up\\n".encode())
    if behaviour.startswith("exit"):
        time.sleep(0.5)
        sys.exit(int(behaviour[4:]))
    while True:
        time.sleep(0.05)
    """
)


def run_fake_ranks(
    tmp_path: Path, behaviours: str, *, notice: bool, grace_s: float = 60
) -> tuple[int, float]:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    nproc = len(behaviours.split(","))
    process = supervisor(
        tmp_path, [sys.executable, str(script), behaviours], nproc=nproc, grace_s=grace_s
    )
    assert process.stdout is not None
    up = [process.stdout.readline() for _ in range(nproc)]
    assert sorted(up) == [f"rank {r} world {nproc} up\n" for r in range(nproc)]
    started = time.monotonic()
    if notice:
        os.kill(process.pid, signal.SIGTERM)
    try:
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return code, time.monotonic() - started


def test_a_rank_ignoring_the_notice_is_killed_at_the_grace_and_the_pod_exits_76(
    tmp_path: Path,
) -> None:
    code, _ = run_fake_ranks(tmp_path, "save,ignore", notice=True, grace_s=1)
    assert code == EXIT_PREEMPTED_NO_CHECKPOINT


def test_a_failing_rank_stops_the_others_and_its_code_wins(tmp_path: Path) -> None:
    # Rank 1 crashes; rank 0 is told to stop, checkpoints and exits 75: still a failure.
    code, _ = run_fake_ranks(tmp_path, "save,exit3", notice=False)
    assert code == 3
    assert "rank 1 exited 3" in (tmp_path / "stderr.log").read_text()


def test_a_rank_that_saw_a_notice_on_its_own_stops_the_others(tmp_path: Path) -> None:
    code, _ = run_fake_ranks(tmp_path, "save,exit75", notice=False)
    assert code == EXIT_PREEMPTED


@pytest.mark.parametrize(
    ("codes", "noticed", "failed_first", "expected"),
    [
        ([0, 0], False, None, 0),
        ([75, 75], True, None, 75),
        ([75, 0], True, None, 75),  # one rank had just finished: its work is saved too
        ([75, 76], True, None, 76),
        ([75, -9], True, None, 76),  # killed at the end of the grace period
        ([75, 1], True, None, 76),  # crashed because a peer vanished during the notice
        ([75, 75], False, None, 75),
        ([75, 1], False, 1, 1),
        ([-11, 75], False, -11, 139),
        ([78, 78], False, 78, 78),
    ],
)
def test_pod_exit_code(
    codes: list[int], noticed: bool, failed_first: int | None, expected: int
) -> None:
    assert pod_exit_code(codes, noticed=noticed, failed_first=failed_first) == expected


def test_the_pod_command_the_launcher_renders_is_what_the_supervisor_expects(
    make_request: Callable[..., LaunchRequest],
) -> None:
    manifests = build_manifests(make_request(nodes=3, gpus_per_node=4), KubernetesLauncherConfig())
    container = manifests.job.spec.template.spec.containers[0]
    assert container.command == ["python", "-m", "trainer.supervisor"]
    name = manifests.job.metadata.name
    # Pod 2 of the Indexed Job: the Job controller sets its completion index.
    parsed = parse(container.args, environ={"JOB_COMPLETION_INDEX": "2"})
    assert parsed.layout == Layout(
        nnodes=3, nproc_per_node=4, node_rank=2, master_addr=f"{name}-0.{name}", master_port=29500
    )
    assert parsed.command[1:] == ["-m", "trainer"]
    assert 0 < parsed.grace_s < manifests.job.spec.template.spec.termination_grace_period_seconds
    env = parsed.layout.rank_env(3, {"KEEP": "1"})
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("11", "3", "12")
    assert (env["GROUP_RANK"], env["KEEP"]) == ("2", "1")

"""A trainer runs under any uid: one with no passwd entry still knows who it is, has a HOME, a
TMPDIR and caches of its own, and trains (the first GPU run failed every on-demand job here:
torch calls `getpass.getuser()` on the CUDA path, which raises for such a uid)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.confinement import open_directory, trainer_runtime_for_tests
from gpujobs.runtime import RunConfig
from gpujobs.spec import TrainerSpec
from tests.worker.support import a_placement
from worker.launchers.base import LaunchRequest, Observation, ObservedState
from worker.launchers.local import LocalLauncher
from worker.launchers.local.containment import SCRATCH_PREFIX, SCRATCH_ROOT

WORKLOAD = "tests.worker.anyuid:build"


@pytest.fixture
def base() -> Iterator[Path]:
    path = open_directory()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def launch_request(base: Path, *, processes: int) -> LaunchRequest:
    trainer = TrainerSpec.model_validate(
        {
            "workload": WORKLOAD,
            "steps": 4,
            "batch_size": 2,
            "amp": "off",
            "dataloader": {"num_workers": 0},
            "checkpoint": {"every_steps": 2},
        }
    )
    config = RunConfig(
        job_id="job-anyuid",
        attempt_id=f"att-anyuid-{processes}",
        trainer=trainer,
        checkpoint_uri=str(base / "checkpoints" / "job-anyuid"),
        progress_every_s=0.05,
        allowed_workload_prefixes=["tests.worker.anyuid"],
    )
    return LaunchRequest(
        job_id="job-anyuid",
        attempt_id=config.attempt_id,
        attempt_number=1,
        job_name="anyuid",
        team="team-a",
        placement=a_placement(),
        gpus_per_node=processes,
        run_config=config,
        job_token="gpj_job-token",
        env={},
    )


def finished(launcher: LocalLauncher, handle: str) -> Observation:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        observed = launcher.status(handle)
        if observed.state not in (ObservedState.RUNNING, ObservedState.PENDING):
            return observed
        time.sleep(0.2)
    raise AssertionError(f"{handle} did not finish")


@pytest.mark.parametrize("processes", [1, 2])
def test_a_trainer_without_a_passwd_entry_knows_who_and_where_it_is_and_trains(
    base: Path, processes: int
) -> None:
    runtime = trainer_runtime_for_tests()
    launcher = LocalLauncher(
        root=base / "attempts", trainer_python=runtime.python, python_path=runtime.python_path
    )
    request = launch_request(base, processes=processes)

    handle = launcher.launch(request)
    observed = finished(launcher, handle)

    work = launcher.root / request.attempt_id / "work"
    assert observed == Observation(ObservedState.SUCCEEDED, exit_code=0), (
        observed,
        (launcher.root / request.attempt_id / "trainer.log").read_text()[-3000:],
    )
    for rank in range(processes):
        seen = json.loads((work / f"anyuid-{rank}.json").read_text())
        if os.geteuid() == 0:  # the job's own uid, which no passwd file names
            assert seen["uid"] != 0 and seen["passwd_entry"] is None
        assert seen["user"]
        assert seen["home"] == str(work)
        for key in ("home_file", "torch_hub", "inductor_cache", "triton_cache"):
            assert Path(seen[key]).is_relative_to(work), (key, seen[key])
        # Its TMPDIR is its own too, a short one for the sockets made there, gone with it.
        scratch = Path(seen["tempfile"]).parent
        assert scratch.parent == SCRATCH_ROOT and scratch.name.startswith(SCRATCH_PREFIX)
        assert not scratch.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run a process as an unknown uid")
def test_a_trainer_no_launcher_named_still_gets_a_user_and_its_directories(base: Path) -> None:
    """Any launcher (an operator's own, a pod spec written by hand) may leave USER unset."""
    uid = 299_999
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    home = base / "home"
    home.mkdir()
    os.chown(home, uid, uid)
    runtime = trainer_runtime_for_tests()
    probe = (
        "import getpass, os; from trainer import scratch; scratch.prepare(); "
        "print(getpass.getuser(), os.path.isdir(os.environ['TRITON_CACHE_DIR']))"
    )
    env = {"PYTHONPATH": runtime.python_path, "HOME": str(home)}
    env |= {"TMPDIR": str(home / "tmp"), "TRITON_CACHE_DIR": str(home / ".cache" / "triton")}

    done = subprocess.run(
        [runtime.python, "-c", probe], env=env, user=uid, group=uid, extra_groups=[],
        capture_output=True, text=True, cwd=home, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"uid{uid}", "True"]

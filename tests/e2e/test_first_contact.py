"""First contact from anywhere: a clone in a folder of mode 0700, run as root, takes the README's
first job to SUCCEEDED through the CLI (the newcomer of issue 23 got 17 failed tests and a first
job that failed: trainers run as their own uids, which could not read the checkout), and the
README's curl job too, with its DataLoader workers (issue 37: it never finished, its workers'
sockets under a TMPDIR too long for AF_UNIX), and passes the local launcher's own tests (issue
37: its trainers could not import `trainer`)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from benchmarks.first_contact import cleanup, private_clone, readme_curl_body, run, run_curl
from devstack.confinement import open_directory

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),  # the README's job takes minutes on a busy 2-core machine
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the private-folder case is root's: trainers run as other uids"
    ),
]

# What a newcomer's `make test` runs first of the trainers' own: each starts real trainers.
LAUNCHER_TESTS = ("tests/worker/test_local_launcher.py",)
LAUNCHER_TESTS_TIMEOUT_S = 800
CURL_JOB_TIMEOUT_S = 480  # 40 small steps: a minute or two on a busy 2-core machine


def test_a_clone_in_a_private_folder_runs_the_readmes_first_job_as_root() -> None:
    with private_clone() as clone:
        result = run(clone)
        try:
            assert result.exit_code == 0, result.output[-6000:]
            assert "SUCCEEDED" in result.output, result.output[-6000:]
            # Isolation intact: the folder stayed private, trainers ran as their own uids, and
            # their directories are outside it.
            assert result.private_mode == 0o700
            assert result.trainer_uids and all(uid != 0 for uid in result.trainer_uids)
            assert not result.trainer_home.startswith(str(clone.parent))
        finally:
            cleanup(result)


def test_the_readmes_curl_job_with_dataloader_workers_succeeds_from_a_private_folder() -> None:
    body = readme_curl_body()
    trainer = body["trainer"]
    assert isinstance(trainer, dict)
    assert trainer.get("dataloader", {}).get("num_workers", 2) > 0  # the default: 2 workers
    with private_clone() as clone:
        result = run_curl(clone, timeout_s=CURL_JOB_TIMEOUT_S)
        try:
            assert result.exit_code == 0, result.output[-6000:]
            assert result.trainer_uids and all(uid != 0 for uid in result.trainer_uids)
        finally:
            cleanup(result)


def test_the_local_launchers_tests_pass_in_a_clone_in_a_private_folder_as_root() -> None:
    """The clone's tests on the clone's code and (hard-linked) virtualenv, as `make test` there
    runs them: its interpreter, packages and checkout are all out of the trainers' reach, so
    they run on the runtime the service lays out for them. That runtime lands under TMPDIR,
    here a folder of this test's, removed after."""
    scratch = open_directory()
    try:
        with private_clone() as clone:
            env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
            env |= {"TMPDIR": str(scratch), "HOME": str(clone.parent)}
            tests = subprocess.run(
                [str(clone / ".venv" / "bin" / "python"), "-m", "pytest", *LAUNCHER_TESTS,
                 "-q", "-x", "-p", "no:cacheprovider"],
                cwd=clone, env=env, capture_output=True, text=True,
                timeout=LAUNCHER_TESTS_TIMEOUT_S, check=False,
            )  # fmt: skip
            assert tests.returncode == 0, (tests.stdout + tests.stderr)[-6000:]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

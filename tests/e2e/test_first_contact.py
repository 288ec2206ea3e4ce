"""First contact from anywhere: a clone in a folder of mode 0700, run as root, takes the README's
first job to SUCCEEDED through the CLI (the newcomer of issue 23 got 17 failed tests and a first
job that failed: trainers run as their own uids, which could not read the checkout)."""

from __future__ import annotations

import os

import pytest

from benchmarks.first_contact import cleanup, private_clone, run

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),  # the README's job takes minutes on a busy 2-core machine
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the private-folder case is root's: trainers run as other uids"
    ),
]


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

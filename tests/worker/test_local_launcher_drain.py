"""drain(): the worker's machine goes away (its container stops); trainers checkpoint and the
attempt reads as preempted, so the job resumes later without spending a restart."""

from __future__ import annotations

from pathlib import Path

from gpujobs.runtime import EXIT_PREEMPTED
from tests.worker.test_local_launcher import (
    launchers,  # noqa: F401  (the fixture that cleans up what a test started)
    live_members,
    log_text,
    make,
    pgid,
    request,
    tmp_path,  # noqa: F401  (reachable by the trainers' uids, unlike pytest's own)
    trainer_started,
    wait_for,
    wait_until_done,
)
from worker.launchers.base import ObservedState
from worker.launchers.local import LocalLauncher


def test_drain_stops_running_trainers_after_their_checkpoint(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    launcher = make(launchers, tmp_path / "attempts", notice_s=60.0)
    running = request(tmp_path, "attempt-run", steps=1_000_000)
    # Another job: two attempts of one job never share its checkpoints at the same time.
    finished = request(tmp_path, "attempt-done", steps=5, job_id="job-2")
    handle = launcher.launch(running)
    done = launcher.launch(finished)
    assert wait_until_done(launcher, done).state == ObservedState.SUCCEEDED
    wait_for(trainer_started(launcher, handle), "the trainer to start")
    group = pgid(launcher, "attempt-run")

    # The stopping worker's main process drains: a launcher of its own over the same state.
    drained = make(launchers, tmp_path / "attempts", notice_s=60.0).drain()

    assert drained == [handle]
    assert live_members(group) == [], "drain returns once the trainers have exited"
    observed = launcher.status(handle)
    assert observed.state == ObservedState.PREEMPTED, log_text(launcher, handle)
    assert observed.exit_code == EXIT_PREEMPTED
    assert observed.message == "the worker was stopped"
    manifests = list(Path(running.run_config.checkpoint_uri).glob("step-*/manifest.json"))
    assert manifests, "the trainer saved a checkpoint before exiting"
    # What had ended keeps its outcome; a second drain finds nothing to do.
    assert launcher.status(done).state == ObservedState.SUCCEEDED
    assert launcher.drain() == []


def test_drain_leaves_a_cancel_in_progress_as_a_cancel(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    launcher = make(launchers, tmp_path / "attempts", notice_s=60.0)
    handle = launcher.launch(request(tmp_path, "attempt-cancel", steps=1_000_000))
    wait_for(trainer_started(launcher, handle), "the trainer to start")
    launcher.cancel(handle)

    assert launcher.drain(timeout_s=60.0) == []
    assert wait_until_done(launcher, handle).state == ObservedState.CANCELLED


def test_drain_kills_what_outlives_the_timeout(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    launcher = make(launchers, tmp_path / "attempts", notice_s=60.0)
    handle = launcher.launch(request(tmp_path, "attempt-slow", steps=1_000_000))
    group = pgid(launcher, "attempt-slow")

    # Zero seconds: SIGTERM, then SIGKILL at once, before any checkpoint can be written.
    assert launcher.drain(timeout_s=0.0) == [handle]

    wait_for(lambda: not live_members(group), "the group to be killed")
    assert launcher.status(handle).state == ObservedState.PREEMPTED

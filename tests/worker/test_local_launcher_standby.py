"""Make-before-break (#25) on one machine: a standby attempt runs beside its job's running
attempt, with real processes and real trainers, and each is stopped, observed and logged on its
own, though both are the same job (its uid, its checkpoint directory)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from gpujobs.runtime import EXIT_PREEMPTED
from gpujobs.spec import CapacityType
from tests.worker.test_local_launcher import (
    launchers,  # noqa: F401  (the fixture that cleans up what a test started)
    live_members,
    log_text,
    make,
    pgid,
    reaped,
    request,
    tmp_path,  # noqa: F401  (reachable by the trainers' uids, unlike pytest's own)
    trainer_started,
    wait_for,
    wait_until_done,
)
from worker.launchers.base import LaunchRequest, ObservedState
from worker.launchers.local import LocalLauncher
from worker.launchers.local.spot_market import TraceMarket

ATTEMPT_FILES = ("stop", "stop_deadline", "notice", "drained", "exit_code")


def attempt(root: Path, attempt_id: str, *, number: int, capacity: CapacityType) -> LaunchRequest:
    """An attempt of job-1 that saves only when it is stopped: the two share the job's
    checkpoint directory, and a real standby writes nothing there before its go."""
    req = request(root, attempt_id, steps=1_000_000, capacity=capacity)
    config = req.run_config.model_copy(update={"checkpoint_every_steps": 10_000_000})
    return dataclasses.replace(req, attempt_number=number, run_config=config)


def own_lines(launcher: LocalLauncher, handle: str, attempt_id: str) -> bool:
    """The attempt's log holds its trainer's progress lines (each names the attempt), and
    none of another attempt's."""
    lines = [line for line in log_text(launcher, handle).splitlines() if '"attempt_id"' in line]
    return bool(lines) and all(f'"attempt_id": "{attempt_id}"' in line for line in lines)


def still_training(launcher: LocalLauncher, handle: str) -> bool:
    before = len(log_text(launcher, handle))
    time.sleep(0.5)  # a few progress lines' worth (progress_every_s is 0.05)
    return len(log_text(launcher, handle)) > before


def test_cancelling_the_running_attempt_leaves_its_standby_running(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    always_spot = TraceMarket(data=[1], gap_seconds=3.0, time_scale=1.0, t0=time.time())
    launcher = make(launchers, tmp_path / "attempts", market=always_spot, notice_s=30.0)
    running = attempt(tmp_path, "attempt-od", number=1, capacity=CapacityType.ON_DEMAND)
    # Not run_config.standby: the launcher never reads it, and a standby trainer would wait
    # for an API's go; here both train, which is harder on the launcher.
    beside = attempt(tmp_path, "attempt-standby", number=2, capacity=CapacityType.SPOT)

    first = launcher.launch(running)
    second = launcher.launch(beside)

    assert (first, second) == ("local:attempt-od", "local:attempt-standby")
    for handle in (first, second):
        wait_for(trainer_started(launcher, handle), f"{handle}'s trainer to start")
        assert launcher.status(handle).state == ObservedState.RUNNING
    groups = pgid(launcher, "attempt-od"), pgid(launcher, "attempt-standby")
    assert groups[0] != groups[1]
    assert all(live_members(group) for group in groups)
    # One job, one uid (when isolating): the case where another attempt's processes would look
    # like this one's if anything of the launcher went by the job.
    works = [launcher.root / name / "work" for name in ("attempt-od", "attempt-standby")]
    assert works[0].stat().st_uid == works[1].stat().st_uid
    wait_for(lambda: own_lines(launcher, first, "attempt-od"), "the running attempt's own log")
    wait_for(lambda: own_lines(launcher, second, "attempt-standby"), "the standby's own log")

    launcher.cancel(first)

    observed = wait_until_done(launcher, first)
    assert observed.state == ObservedState.CANCELLED
    assert observed.exit_code == EXIT_PREEMPTED  # it checkpointed, for the standby to go on from
    assert list(Path(running.run_config.checkpoint_uri).glob("step-*/manifest.json"))
    wait_for(lambda: not live_members(groups[0]), "every process of the running attempt to exit")
    wait_for(lambda: reaped(launcher, first, groups[0]), "its group to be reaped")
    # The standby was not touched: same group, nothing of the stop on its record, still training.
    assert launcher.status(second).state == ObservedState.RUNNING
    assert live_members(groups[1])
    assert pgid(launcher, "attempt-standby") == groups[1]
    assert not any((launcher.root / "attempt-standby" / f).exists() for f in ATTEMPT_FILES)
    assert wait_for(lambda: still_training(launcher, second), "the standby to keep training")
    assert own_lines(launcher, second, "attempt-standby")
    # A restarted worker sees the same: the record on disk is per attempt.
    again = make(launchers, tmp_path / "attempts", market=always_spot, notice_s=30.0)
    assert again.status(first).state == ObservedState.CANCELLED
    assert again.status(second).state == ObservedState.RUNNING


def test_a_spot_notice_to_one_attempt_leaves_the_other_running(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    """The spot attempt beside an on-demand one is taken back: the market's notice (its
    preemption time, its SIGTERM and SIGKILL) is the spot attempt's alone."""
    market = TraceMarket(data=[1] + [0] * 50, gap_seconds=3.0, time_scale=1.0, t0=time.time())
    launcher = make(launchers, tmp_path / "attempts", market=market, notice_s=60.0)
    on_demand = attempt(tmp_path, "attempt-od", number=1, capacity=CapacityType.ON_DEMAND)
    spot = attempt(tmp_path, "attempt-spot", number=2, capacity=CapacityType.SPOT)

    running = launcher.launch(on_demand)
    beside = launcher.launch(spot)

    assert (launcher.root / "attempt-spot" / "preempt_at").exists()
    assert not (launcher.root / "attempt-od" / "preempt_at").exists()
    preempt_at = float((launcher.root / "attempt-spot" / "preempt_at").read_text())
    for handle in (running, beside):
        wait_for(trainer_started(launcher, handle), f"{handle}'s trainer to start")
    wait_for(lambda: time.time() > preempt_at, "the market to take the spot instance back")

    observed = wait_until_done(launcher, beside)  # each status() here polls the market too

    assert observed.state == ObservedState.PREEMPTED
    assert observed.exit_code == EXIT_PREEMPTED
    assert launcher.status(running).state == ObservedState.RUNNING
    assert live_members(pgid(launcher, "attempt-od"))
    assert not any((launcher.root / "attempt-od" / f).exists() for f in ATTEMPT_FILES)
    assert wait_for(lambda: still_training(launcher, running), "the on-demand one to keep going")

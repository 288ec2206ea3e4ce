"""The local launcher with real processes and the real trainer (a tiny GPT on CPU)."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.confinement import open_directory, trainer_python
from gpujobs.runtime import EXIT_CONFIG_ERROR, EXIT_PREEMPTED, RunConfig
from gpujobs.spec import CapacityType, TrainerSpec
from tests.worker.support import a_placement
from worker.launchers.base import LaunchRequest, Observation, ObservedState
from worker.launchers.local import LAUNCH_GRACE_S, LocalLauncher, containment
from worker.launchers.local.processes import group_members as live_members
from worker.launchers.local.spot_market import RateMarket, TraceMarket

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "corpus_bytes": 50_000}
TIMEOUT = 60.0


def request(
    tmp_path: Path,
    attempt_id: str,
    *,
    steps: int = 10,
    capacity: CapacityType = CapacityType.ON_DEMAND,
    workload: str = "gpt",
    job_id: str = "job-1",
    num_workers: int = 0,
) -> LaunchRequest:
    trainer = TrainerSpec.model_validate(
        {
            "workload": workload,
            "steps": steps,
            "batch_size": 2,
            "amp": "off",
            "dataloader": {"num_workers": num_workers},
            "checkpoint": {"every_steps": 5},
            "args": TINY,
        }
    )
    config = RunConfig(
        job_id=job_id,
        attempt_id=attempt_id,
        trainer=trainer,
        checkpoint_uri=str(tmp_path / "checkpoints" / job_id),
        progress_every_s=0.05,
    )
    return LaunchRequest(
        job_id=job_id,
        attempt_id=attempt_id,
        attempt_number=1,
        job_name="tiny",
        team="team-a",
        placement=a_placement(capacity),
        gpus_per_node=1,
        run_config=config,
        job_token="gpj_test-token",
        env={"OMP_NUM_THREADS": "1"},
    )


def wait_for(
    predicate: Callable[[], Any], what: str | Callable[[], str], timeout: float = TIMEOUT
) -> Any:
    """`what` may be a function, so a failure reports the state at the timeout, not before."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def wait_until_done(launcher: LocalLauncher, handle: str) -> Observation:
    def done() -> Observation | None:
        observed = launcher.status(handle)
        return (
            None if observed.state in (ObservedState.RUNNING, ObservedState.PENDING) else observed
        )

    def what() -> str:
        observed = launcher.status(handle)
        return f"{handle} to stop (it is {observed}); log:\n{log_text(launcher, handle)}"

    return wait_for(done, what)


def log_text(launcher: LocalLauncher, handle: str) -> str:
    return "".join(launcher.logs(handle))


def trainer_started(launcher: LocalLauncher, handle: str) -> Callable[[], bool]:
    """The trainer printed its start line: its SIGTERM handler is installed."""
    return lambda: '"event": "start"' in log_text(launcher, handle)


def pgid(launcher: LocalLauncher, attempt_id: str) -> int:
    return int(json.loads((launcher.root / attempt_id / "pid").read_text())["pid"])


def supervisors_of(directory: Path) -> list[int]:
    """Running supervisor processes whose command line names this attempt's directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker.launchers.supervise" in cmdline and str(directory / "exit_code").encode() in (
            cmdline
        ):
            found.append(int(entry.name))
    return found


def reaped(launcher: LocalLauncher, handle: str, group: int) -> bool:
    """After a status poll (the reconciler's), not even a zombie of the group is left."""
    launcher.status(handle)
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Run as root, trainers run as other uids, which cannot pass pytest's 0700 base directory."""
    path = open_directory()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[list[LocalLauncher]]:
    """Launchers made by a test; whatever they still run is killed at the end, and the TMPDIRs
    of attempts no status poll saw end are removed."""
    made: list[LocalLauncher] = []
    yield made
    for launcher in made:
        if not launcher.root.exists():
            continue
        for directory in launcher.root.iterdir():
            if (directory / "pid").exists() and not (directory / "exit_code").exists():
                handle = "local:" + directory.name
                if launcher.status(handle).state == ObservedState.RUNNING:
                    launcher.cancel(handle)
                    group = pgid(launcher, directory.name)
                    for member in live_members(group):
                        os.kill(member, 9)
                    wait_for(lambda g=group: not live_members(g), f"{handle}'s processes to end")
            containment.remove_scratch(directory)


def make(launchers: list[LocalLauncher], root: Path, **kwargs: Any) -> LocalLauncher:
    kwargs.setdefault("trainer_python", trainer_python())
    launcher = LocalLauncher(root=root, **kwargs)
    launchers.append(launcher)
    return launcher


def test_a_tiny_job_runs_to_completion_once(tmp_path: Path, launchers: list[LocalLauncher]) -> None:
    launcher = make(launchers, tmp_path / "attempts")
    req = request(tmp_path, "attempt-ok")

    handle = launcher.launch(req)
    again = launcher.launch(req)

    assert again == handle
    assert handle == "local:attempt-ok"
    assert len(supervisors_of(launcher.root / "attempt-ok")) <= 1  # may already have finished
    first = launcher.status(handle)
    assert first.state in (ObservedState.RUNNING, ObservedState.SUCCEEDED)
    done = wait_until_done(launcher, handle)
    assert done == Observation(ObservedState.SUCCEEDED, exit_code=0)
    checkpoints = Path(req.run_config.checkpoint_uri)
    assert (checkpoints / "step-000000000010" / "manifest.json").exists()
    log = log_text(launcher, handle)
    assert '"event": "start"' in log
    assert '"event": "done"' in log
    # Once finished, a repeated launch still starts nothing.
    assert launcher.launch(req) == handle
    assert launcher.status(handle) == Observation(ObservedState.SUCCEEDED, exit_code=0)
    group = pgid(launcher, "attempt-ok")
    wait_for(lambda: reaped(launcher, handle, group), "the group to be reaped (no zombie)")


def test_dataloader_workers_run_under_a_launcher_root_as_long_as_a_private_clones(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    """Issue 37: run as root from a clone under /root, attempts live under
    /var/lib/gpujobs/<hash>/attempts and a trainer's TMPDIR was `<attempt>/work/tmp`, 88
    characters; the sockets DataLoader workers hand tensors over by, made under it, passed
    AF_UNIX's 107 and the loader retried forever. Here the root is longer still."""
    root = tmp_path / ("state" * 8) / "attempts"
    assert len(str(root)) > len(f"/var/lib/gpujobs/{'0' * 16}/attempts")
    launcher = make(launchers, root)
    attempt = str(uuid.uuid4())  # as long as the scheduler's
    handle = launcher.launch(request(tmp_path, attempt, steps=6, num_workers=2))
    scratch = Path((root / attempt / "scratch").read_text())

    observed = wait_until_done(launcher, handle)

    assert observed.state == ObservedState.SUCCEEDED, log_text(launcher, handle)
    assert not scratch.exists()  # the trainer's TMPDIR goes with the attempt


def test_launching_the_same_attempt_twice_starts_one_process_group(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    launcher = make(launchers, tmp_path / "attempts", notice_s=30.0)
    req = request(tmp_path, "attempt-twice", steps=1_000_000)

    handle = launcher.launch(req)
    pid_file = (launcher.root / "attempt-twice" / "pid").read_text()
    assert launcher.launch(req) == handle
    # A second launcher on the same machine (another worker) finds it too.
    assert make(launchers, tmp_path / "attempts").launch(req) == handle

    assert (launcher.root / "attempt-twice" / "pid").read_text() == pid_file
    assert len(supervisors_of(launcher.root / "attempt-twice")) == 1
    assert launcher.status(handle).state == ObservedState.RUNNING


def test_a_failing_trainer_is_failed_with_its_exit_code(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    launcher = make(launchers, tmp_path / "attempts")
    handle = launcher.launch(request(tmp_path, "attempt-bad", workload="nonexistent.mod:build"))

    observed = wait_until_done(launcher, handle)

    assert observed.state == ObservedState.FAILED
    assert observed.exit_code == EXIT_CONFIG_ERROR  # a configuration the user must fix
    assert observed.message is not None and "nonexistent" in observed.message
    assert "nonexistent" in log_text(launcher, handle)


def test_a_shell_through_a_workload_is_refused_where_the_trainer_starts(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    """A spec that reached the launcher without the API's check (stored before it existed, say)
    naming `subprocess:getoutput`: the trainer refuses it before importing it, exit 78."""
    outside = Path(tempfile.mkdtemp(prefix="gj", dir="/tmp"))  # short: option names are <= 64
    outside.chmod(0o777)  # whoever the trainer runs as could write here: only the refusal stops it
    marker = outside / "pwned"
    launcher = make(launchers, tmp_path / "attempts")
    req = request(tmp_path, "attempt-shell", workload="subprocess:getoutput")
    trainer = req.run_config.trainer.model_copy(update={"args": {f"touch {marker}": True}})
    req = dataclasses.replace(
        req, run_config=req.run_config.model_copy(update={"trainer": trainer})
    )

    observed = wait_until_done(launcher, launcher.launch(req))

    assert observed.state == ObservedState.FAILED
    assert observed.exit_code == EXIT_CONFIG_ERROR
    assert "module 'subprocess' is not allowed" in log_text(launcher, "local:attempt-shell")
    assert not marker.exists()
    shutil.rmtree(outside)


def test_spot_preemption_sends_the_notice_and_the_trainer_checkpoints(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    market = TraceMarket(data=[1] + [0] * 50, gap_seconds=3.0, time_scale=1.0, t0=time.time())
    launcher = make(launchers, tmp_path / "attempts", market=market, notice_s=60.0)
    req = request(tmp_path, "attempt-spot", steps=1_000_000, capacity=CapacityType.SPOT)

    handle = launcher.launch(req)
    preempt_at = float((launcher.root / "attempt-spot" / "preempt_at").read_text())
    assert preempt_at == pytest.approx(market.t0 + 3.0)
    # Observe nothing until the trainer is up: the notice goes out when status() is polled.
    wait_for(trainer_started(launcher, handle), "the trainer to start")
    wait_for(lambda: time.time() > preempt_at, "the market to take the instance back")

    observed = wait_until_done(launcher, handle)

    assert observed.state == ObservedState.PREEMPTED
    assert observed.exit_code == EXIT_PREEMPTED
    assert (launcher.root / "attempt-spot" / "notice").exists()
    manifests = list(Path(req.run_config.checkpoint_uri).glob("step-*/manifest.json"))
    assert manifests, "the trainer saved a checkpoint on the notice"
    assert '"event": "checkpoint"' in log_text(launcher, handle)
    assert launcher.spot_available() is False  # the trace has no spot after tick 0


def test_no_spot_capacity_starts_nothing(tmp_path: Path, launchers: list[LocalLauncher]) -> None:
    market = TraceMarket(data=[0], gap_seconds=3.0, time_scale=1.0, t0=time.time())
    launcher = make(launchers, tmp_path / "attempts", market=market)
    req = request(tmp_path, "attempt-none", capacity=CapacityType.SPOT)

    handle = launcher.launch(req)

    observed = launcher.status(handle)
    assert observed.state == ObservedState.NO_CAPACITY
    assert observed.message
    assert not (launcher.root / "attempt-none" / "pid").exists()
    assert not supervisors_of(launcher.root / "attempt-none")
    assert launcher.spot_available() is False
    # On-demand attempts do not go through the spot market.
    on_demand = launcher.launch(
        request(tmp_path, "attempt-od", steps=1_000_000, capacity=CapacityType.ON_DEMAND)
    )
    assert (launcher.root / "attempt-od" / "pid").exists()
    assert launcher.status(on_demand).state == ObservedState.RUNNING


def test_cancel_from_a_restarted_launcher_stops_the_whole_process_group(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    first = make(launchers, tmp_path / "attempts", notice_s=30.0)
    handle = first.launch(request(tmp_path, "attempt-cancel", steps=1_000_000))
    group = pgid(first, "attempt-cancel")
    wait_for(trainer_started(first, handle), "the trainer to start")
    assert first.status(handle).state == ObservedState.RUNNING
    assert len(live_members(group)) >= 2  # the supervisor and the trainer

    # The worker restarts: a new launcher on the same root knows the attempt from disk alone.
    second = make(launchers, tmp_path / "attempts", notice_s=30.0)
    assert second.status(handle).state == ObservedState.RUNNING
    assert '"event": "start"' in log_text(second, handle)
    second.cancel(handle)
    second.cancel(handle)  # repeated cancels are harmless

    observed = wait_until_done(second, handle)
    assert observed.state == ObservedState.CANCELLED
    assert observed.exit_code == EXIT_PREEMPTED  # the trainer checkpointed on SIGTERM
    wait_for(lambda: not live_members(group), "every process of the group to exit")
    # The supervisor's parent (the first launcher) collects it: nothing of the group is left.
    wait_for(lambda: reaped(first, handle, group), "the group to be reaped (no zombie)")
    assert first.status(handle) == second.status(handle)
    assert second.status("local:no-such-attempt").state == ObservedState.LOST


def test_rate_market_preemption_time_is_deterministic_per_attempt() -> None:
    market = RateMarket(rate_per_hour=2.0, time_scale=60.0)
    again = RateMarket(rate_per_hour=2.0, time_scale=60.0)

    a = market.preemption_time(now=1000.0, attempt_id="attempt-a")
    b = market.preemption_time(now=1000.0, attempt_id="attempt-b")

    assert a is not None and b is not None
    assert again.preemption_time(now=1000.0, attempt_id="attempt-a") == a
    assert a != b
    assert a > 1000.0 and b > 1000.0
    # The lifetime is the attempt's own, wherever it starts.
    later = market.preemption_time(now=5000.0, attempt_id="attempt-a")
    assert later == pytest.approx(a + 4000.0)
    assert market.available(1000.0)
    assert (
        RateMarket(rate_per_hour=0.0, time_scale=60.0).preemption_time(
            now=1000.0, attempt_id="attempt-a"
        )
        is None
    )


def test_rate_market_lifetimes_average_one_over_the_rate() -> None:
    market = RateMarket(rate_per_hour=3600.0, time_scale=1.0)  # one per wall second
    lifetimes = [
        market.preemption_time(now=0.0, attempt_id=f"attempt-{i}") or 0.0 for i in range(2000)
    ]
    assert sum(lifetimes) / len(lifetimes) == pytest.approx(1.0, rel=0.1)


def test_trace_market_replays_its_ticks() -> None:
    market = TraceMarket(data=[1, 1, 0, 1], gap_seconds=60.0, time_scale=20.0, t0=100.0)  # 3 s

    assert [market.available(100.0 + 3.0 * i + 0.5) for i in range(5)] == [
        True, True, False, True, True,
    ]  # fmt: skip
    assert market.preemption_time(now=100.5, attempt_id="x") == pytest.approx(106.0)
    assert market.preemption_time(now=109.5, attempt_id="x") == pytest.approx(118.0)
    always = TraceMarket(data=[1], gap_seconds=60.0, time_scale=20.0, t0=100.0)
    assert always.preemption_time(now=100.0, attempt_id="x") is None


# A worker that dies in the middle of a launch: SIGKILL where the test says, on the real launcher.
KILLED_LAUNCH = """
import os, signal, sys
from pathlib import Path
import worker.launchers.local.launcher as local
import worker.launchers.local.processes as processes
from tests.worker.test_local_launcher import STEPS, request

tmp, root, where, trainer_python = sys.argv[1:]
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if where == "before the trainer starts":
    local.subprocess.Popen = die
else:
    processes.record_pid = die
launcher = local.LocalLauncher(root=Path(root), trainer_python=trainer_python)
launcher.launch(request(Path(tmp), "attempt-killed", steps=STEPS))
"""
STEPS = 200  # long enough that the orphan trainer is still running when it is looked for


def killed_mid_launch(tmp_path: Path, where: str) -> Path:
    """Run a launch of `attempt-killed` in a process SIGKILLed at `where`; its directory."""
    root = tmp_path / "attempts"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_LAUNCH, str(tmp_path), str(root), where, trainer_python()],
        cwd=Path(__file__).resolve().parents[2],
        timeout=TIMEOUT,
        check=False,
    )
    directory = root / "attempt-killed"
    assert killed.returncode == -signal.SIGKILL
    assert (directory / "launch.lock").exists()
    assert not (directory / "pid").exists()
    return directory


def supervisors(directory: Path) -> list[int]:
    """The attempt's live supervisor processes: how many times it was started."""
    exit_file = str(directory / "exit_code").encode()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"worker.launchers.supervise" in args and exit_file in args and state != "Z":
            found.append(int(cmdline.parent.name))
    return found


@pytest.mark.parametrize("where", ["before the trainer starts", "after the trainer started"])
def test_a_relaunch_takes_over_a_launch_whose_worker_was_killed(
    tmp_path: Path, launchers: list[LocalLauncher], where: str
) -> None:
    """The worker is SIGKILLed between taking the launch lock and recording the trainer's pid;
    the reconciler's relaunch must start the attempt, or adopt the trainer that did start,
    rather than leave it pending until it is given up as lost and launched a second time."""
    directory = killed_mid_launch(tmp_path, where)
    orphans = supervisors(directory)
    assert len(orphans) == (0 if where == "before the trainer starts" else 1)

    launcher = make(launchers, tmp_path / "attempts")
    req = request(tmp_path, "attempt-killed", steps=STEPS)
    handle = launcher.launch(req)

    started = supervisors(directory)
    assert len(started) == 1  # one trainer, whoever started it
    if orphans:
        assert started == orphans
    assert pgid(launcher, "attempt-killed") == started[0]
    assert launcher.launch(req) == handle  # nothing more starts
    assert supervisors(directory) == started
    observed = wait_until_done(launcher, handle)
    assert observed.state == ObservedState.SUCCEEDED, log_text(launcher, handle)


def test_a_launch_that_a_live_worker_holds_is_left_to_it(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    """Another worker is launching the attempt (it holds the lock): a second launch starts
    nothing; the attempt is lost only if that worker hangs past the grace, or dies."""
    launcher = make(launchers, tmp_path / "attempts")
    directory = tmp_path / "attempts" / "attempt-held"
    directory.mkdir(parents=True)
    lock = directory / "launch.lock"
    lock.touch()
    handle = "local:attempt-held"

    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert launcher.launch(request(tmp_path, "attempt-held")) == handle
        assert not (directory / "pid").exists()
        assert launcher.status(handle).state == ObservedState.PENDING

        stale = time.time() - LAUNCH_GRACE_S - 1
        os.utime(lock, (stale, stale))
        hung = launcher.status(handle)
        assert hung.state == ObservedState.LOST
        assert hung.message == "the launch never completed"
        os.utime(lock)

    died = launcher.status(handle)  # the lock is free and no trainer was recorded
    assert died.state == ObservedState.LOST
    assert not (directory / "pid").exists()


def test_a_status_check_adopts_the_trainer_of_a_launch_whose_worker_was_killed(
    tmp_path: Path, launchers: list[LocalLauncher]
) -> None:
    """A second worker recorded the handle while the first was launching, then the first was
    SIGKILLed after starting the trainer: no relaunch comes, so the status check must find the
    trainer, not report the attempt lost while it runs on unwatched and unbilled."""
    directory = killed_mid_launch(tmp_path, "after the trainer started")
    (orphan,) = supervisors(directory)
    launcher = make(launchers, tmp_path / "attempts")

    observed = launcher.status("local:attempt-killed")

    assert observed.state == ObservedState.RUNNING
    assert pgid(launcher, "attempt-killed") == orphan
    done = wait_until_done(launcher, "local:attempt-killed")
    assert done.state == ObservedState.SUCCEEDED
    assert supervisors(directory) == []

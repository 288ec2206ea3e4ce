"""A trainer that never reports is noticed (issue 37): its job's status and events say so with the
last lines of its log after `first_report_warn_s`, and after `first_report_fail_s` it is stopped
and its job FAILED, billed until it stopped. A real trainer hung in its workload's build, on the
local launcher, with the control plane's clock moved by the test; and the rules on their own."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal
from api.database import transaction
from api.jobs import service as jobs
from api.settings import Settings
from devstack.confinement import open_directory, trainer_python, trainer_python_path
from gpujobs.reasons import EndReason, StopReason
from gpujobs.resources import JobStatus
from gpujobs.spec import JobSpec
from tests.worker.silent import WAITING
from tests.worker.support import (
    Clock,
    RecordingLauncher,
    attempts,
    control_plane,
    events,
    job,
    principal,
    trainer_report,
)
from tests.worker.test_local_launcher import live_members, pgid, wait_for
from tests.worker.test_reconciler import World
from worker.control import ControlPlane
from worker.first_report import STOPPED, Facts, Silence, decide
from worker.launchers.base import ObservedState
from worker.launchers.local import LocalLauncher, containment
from worker.launchers.local.configure import launcher_from_settings
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

WARN_S = 60.0
FAIL_S = 300.0
SILENT = "has not reported progress"
TIMEOUT_S = 120.0  # a trainer's start on a busy 2-core machine, or a stop's SIGKILL


def bounds(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"first_report_warn_s": WARN_S, "first_report_fail_s": FAIL_S}
    )


# The rules -------------------------------------------------------------------------------------

T0 = datetime(2026, 12, 6, tzinfo=UTC)


def silent(*, after_s: float, **facts: bool) -> Silence | None:
    values = {"reported": False, "warned": False, "stopping": False} | facts
    known = Facts(running_since=T0, **values)
    short = Settings(first_report_warn_s=WARN_S, first_report_fail_s=FAIL_S)
    return decide(known, now=T0 + timedelta(seconds=after_s), settings=short)


def test_a_trainer_is_warned_about_once_then_stopped_unless_it_reports() -> None:
    assert silent(after_s=WARN_S - 1) is None
    assert silent(after_s=WARN_S) == Silence.WARN
    assert silent(after_s=WARN_S + 1, warned=True) is None
    assert silent(after_s=FAIL_S, warned=True) == Silence.STOP
    assert silent(after_s=FAIL_S) == Silence.STOP  # a pass that missed the warning's time
    assert silent(after_s=FAIL_S, reported=True) is None
    assert silent(after_s=FAIL_S, stopping=True) is None  # a cancel, a migration, a handover
    assert silent(after_s=WARN_S, reported=True, status_warns=True) == Silence.HEARD
    never_ran = Facts(running_since=None, reported=False, warned=False, stopping=False)
    assert decide(never_ran, now=T0, settings=Settings()) is None  # not training: a standby


# The control loop, with a scripted launcher ----------------------------------------------------


@pytest.fixture
def short(settings: Settings, session_factory: sessionmaker[Session]) -> World:
    launcher = RecordingLauncher()
    clock = Clock()
    return World(
        cp=control_plane(bounds(settings), session_factory, launcher, clock),
        launcher=launcher,
        clock=clock,
        factory=session_factory,
        who=principal(session_factory),
    )


def test_a_trainer_that_reports_late_is_warned_about_and_then_heard(short: World) -> None:
    world = short
    job_id, attempt_id = world.place()
    reconcile_once(world.cp)  # seen running
    world.clock.advance(WARN_S)

    reconcile_once(world.cp)
    reconcile_once(world.cp)

    warned = job(world.factory, job_id)
    assert warned.status == JobStatus.RUNNING.value
    assert warned.status_reason is not None and SILENT in warned.status_reason
    assert len([e for e in events(world.factory, job_id) if SILENT in (e.reason or "")]) == 1
    token = world.launcher.launches[-1].job_token
    trainer_report(world.factory, job_token=token, job_id=job_id, attempt_id=attempt_id,
                   step=1, checkpoint=0)  # fmt: skip

    reconcile_once(world.cp)
    world.clock.advance(FAIL_S)
    reconcile_once(world.cp)

    heard = job(world.factory, job_id)
    assert heard.status == JobStatus.RUNNING.value
    assert heard.status_reason is not None and "reported progress" in heard.status_reason
    assert SILENT not in heard.status_reason
    assert not world.launcher.cancels


def test_an_earlier_attempts_report_is_not_this_ones(short: World) -> None:
    """A job resumed on a new attempt keeps its progress: the last report is the old trainer's,
    and says nothing of the new one's."""
    world = short
    job_id, attempt_id = world.place()
    token = world.launcher.launches[-1].job_token
    trainer_report(world.factory, job_token=token, job_id=job_id, attempt_id=attempt_id,
                   step=1, checkpoint=0)  # fmt: skip
    world.launcher.script(attempt_id, ObservedState.PREEMPTED)
    reconcile_once(world.cp)
    assert len(schedule_once(world.cp).placed) == 1
    reconcile_once(world.cp)  # the new attempt is seen running

    world.clock.advance(FAIL_S)
    reconcile_once(world.cp)

    second = attempts(world.factory, job_id)[-1]
    assert second.id != attempt_id and second.stop_reason == StopReason.NO_FIRST_REPORT


# A real trainer that hangs before its first step ----------------------------------------------


@pytest.fixture
def hung(settings: Settings, session_factory: sessionmaker[Session]) -> Iterator[Hung]:
    """The control plane as `make run` composes it (the local launcher from the settings: real
    trainers, as their jobs' uids when root) with the bounds shortened, a clock the test moves,
    and `tests.worker.silent` allowed as a workload."""
    base = open_directory()
    configured = Settings(
        home=base / "home",
        database_url=settings.database_url,
        credentials_file=base / "credentials.json",
        trainer_home=base / "trainers",
        trainer_python=trainer_python(),
        trainer_python_path=trainer_python_path(),
        workload_module_prefixes=["tests.worker.silent"],
        spot_notice_s=2.0,  # a stop's SIGTERM, then SIGKILL: the hung build ignores the first
        first_report_warn_s=WARN_S,
        first_report_fail_s=FAIL_S,
    )
    launcher = launcher_from_settings(configured)
    clock = Clock()
    cp = ControlPlane(settings=configured, factory=session_factory, launcher=launcher, clock=clock)
    yield Hung(cp=cp, launcher=launcher, clock=clock, who=principal(session_factory))
    for directory in launcher.root.glob("*/") if launcher.root.is_dir() else []:
        if (directory / "pid").exists():
            for member in live_members(pgid(launcher, directory.name)):
                os.kill(member, signal.SIGKILL)
        containment.remove_scratch(directory)
    shutil.rmtree(base, ignore_errors=True)


@dataclass
class Hung:
    cp: ControlPlane
    launcher: LocalLauncher
    clock: Clock
    who: Principal

    def reconcile_until(self, done: Callable[[], bool], what: str) -> None:
        """Passes of the reconciler, as its loop makes them, until `done`."""
        wait_for(lambda: reconcile_once(self.cp) >= 0 and done(), what, timeout=TIMEOUT_S)


@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_a_trainer_hung_before_its_first_step_is_said_and_then_failed(hung: Hung) -> None:
    factory = hung.cp.factory
    spec = {"name": "hangs", "trainer": {"workload": "tests.worker.silent:build", "steps": 10,
            "dataloader": {"num_workers": 0}}, "estimated_hours": 0.1}  # fmt: skip
    with transaction(factory) as session:
        job_id = jobs.submit(
            session, principal=hung.who, spec=JobSpec.model_validate(spec), idempotency_key=None,
            workload_prefixes=hung.cp.settings.workload_module_prefixes,
        ).job.id  # fmt: skip
    assert len(schedule_once(hung.cp).placed) == 1
    attempt = attempts(factory, job_id)[0]
    handle = f"local:{attempt.id}"
    hung.reconcile_until(lambda: job(factory, job_id).status == "RUNNING", "the trainer to run")
    wait_for(lambda: WAITING in "".join(hung.launcher.logs(handle)), "the workload to wait")
    group = pgid(hung.launcher, attempt.id)

    hung.clock.advance(WARN_S)
    reconcile_once(hung.cp)

    warned = job(factory, job_id)
    assert warned.status == "RUNNING"
    assert warned.status_reason is not None
    assert SILENT in warned.status_reason and WAITING in warned.status_reason
    [note] = [e for e in events(factory, job_id) if SILENT in (e.reason or "")]
    assert note.from_status == note.to_status == "RUNNING" and WAITING in (note.reason or "")
    assert live_members(group)  # only said: it runs on

    hung.clock.advance(FAIL_S - WARN_S)
    hung.reconcile_until(lambda: job(factory, job_id).status == "FAILED", "the job to fail")

    failed = job(factory, job_id)
    assert failed.status_reason is not None and failed.status_reason.startswith(STOPPED)
    assert WAITING in failed.status_reason
    assert failed.restarts == 0 and len(attempts(factory, job_id)) == 1  # not retried
    [ended] = attempts(factory, job_id)
    assert ended.end_reason == EndReason.NO_FIRST_REPORT
    assert ended.started_at == attempt.launched_at and ended.ended_at == hung.clock.now
    assert ended.cost_microusd and ended.cost_microusd > 0  # billed for what ran, until it stopped
    assert not live_members(group)
    assert [e.to_status for e in events(factory, job_id)][-1] == "FAILED"

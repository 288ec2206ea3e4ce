"""A team's trainer against the service's own loop, run for real (issue 36): the scheduler,
the reconciler, a real database and the local launcher's real trainer processes, with a hostile
workload (tests/worker/hostile_processes.py).

- A trainer that exits 75 (what a trainer exits with after a preemption notice) on spot, when
  no notice was given: it was read as a spot preemption, spent no restart and relaunched
  forever, and every team's quotes learned its pool as unreliable.
- A job whose environment no process can hold (a NUL byte in a value): every launch failed,
  the job stayed SCHEDULED, and each retry minted a new job token.
- A fork bomb: nothing bounded a trainer's processes below the machine's pid limit.
- A helper left behind by a released attempt (a session of its own, another directory, an empty
  environment, SIGTERM ignored): the launcher did not find it, so the handover promoted the
  standby while it kept writing into the job's checkpoints.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from api.database import transaction
from api.jobs import service as jobs
from api.models import ApiToken, Job, JobAttempt, new_id
from api.placement.world import pool_histories
from api.settings import Settings
from devstack.confinement import trainer_python_path
from gpujobs.resources import JobStatus
from gpujobs.spec import JobSpec
from tests.worker.hostile_processes import LEFTOVER_LOG, LEFTOVER_PID, REPORT
from tests.worker.support import attempts, events, job, principal
from tests.worker.test_local_launcher import (
    launchers,  # noqa: F401  (the fixture that cleans up what a test started)
    make,
    tmp_path,  # noqa: F401  (reachable by the trainers' uids, unlike pytest's own)
    wait_for,
)
from worker.control import ControlPlane
from worker.launchers.local import LocalLauncher
from worker.launchers.local.processes import attempt_processes, real_uid, start_time
from worker.launchers.local.spot_market import RateMarket
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once

PREFIX = "tests.worker.hostile_processes"
WORKLOAD = f"{PREFIX}:build"
TIMEOUT = 180.0
MAX_PIDS = 64  # the trainers' pid limit in these tests: small, so a bomb is over quickly
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root runs trainers as their job's own uid"
)
on_postgres = pytest.mark.parametrize("settings", ["postgres"], indirect=True)


@dataclass
class Service:
    cp: ControlPlane
    factory: sessionmaker[Session]
    launcher: LocalLauncher

    def submit(self, *, env: dict[str, str], **spec: Any) -> str:
        body: dict[str, Any] = {
            "name": f"hostile-{uuid.uuid4().hex[:8]}",
            "trainer": {"workload": WORKLOAD, "steps": 1, "dataloader": {"num_workers": 0}},
            "capacity": {"types": ["spot"]},
            "estimated_hours": 1.0,
            "env": env,
        }
        with transaction(self.factory) as session:
            submitted = jobs.submit(
                session,
                principal=principal(self.factory),
                spec=JobSpec.model_validate(body | spec),
                idempotency_key=None,
                workload_prefixes=[PREFIX],
            )
            return submitted.job.id

    def run(self, job_id: str, *, attempts_at_most: int) -> Job:
        """Schedule and reconcile until the job has ended; fails once it has had more attempts
        than `attempts_at_most`."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            schedule_once(self.cp)
            reconcile_once(self.cp)
            row = job(self.factory, job_id)
            if JobStatus(row.status).terminal:
                return row
            tried = attempts(self.factory, job_id)
            assert len(tried) <= attempts_at_most, (
                f"{len(tried)} attempts and still {row.status}: {row.status_reason}"
            )
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} did not end: {job(self.factory, job_id).status}")


@pytest.fixture
def service(
    settings: Settings,
    session_factory: sessionmaker[Session],
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> Iterator[Service]:
    """The control loop with the local launcher on a spot market that is always there and
    never takes an instance back: no notice is ever given."""
    settings = settings.model_copy(
        update={
            "checkpoint_uri": str(tmp_path / "checkpoints"),
            "workload_module_prefixes": [PREFIX],
        }
    )
    launcher = make(
        launchers,
        tmp_path / "attempts",
        market=RateMarket(rate_per_hour=0.0, time_scale=1.0),
        python_path=trainer_python_path(),
        max_pids=MAX_PIDS,
    )
    cp = ControlPlane(settings=settings, factory=session_factory, launcher=launcher, clock=_now)
    yield Service(cp=cp, factory=session_factory, launcher=launcher)
    for directory in launcher.root.glob("*/work"):
        _kill_uid(directory.stat().st_uid)


def _now() -> datetime:
    return datetime.now(UTC)


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if real_uid(entry) == uid:
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return found


def _kill_uid(uid: int) -> None:
    """Every process a trainer's uid left: the test's to clean up, whatever the launcher did."""
    if uid == os.geteuid():
        return  # not isolating: the trainers were ours, and the launcher's fixture stops them
    for pid in _processes_of(uid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@on_postgres
def test_an_exit_75_without_a_notice_is_a_failure_and_teaches_no_pool(service: Service) -> None:
    job_id = service.submit(
        env={"HOSTILE_PROCESSES": "exit", "HOSTILE_EXIT_CODE": "75"}, max_restarts=2
    )

    ended = service.run(job_id, attempts_at_most=3)

    assert ended.status == JobStatus.FAILED.value, ended.status_reason
    assert (ended.restarts, ended.preemptions) == (2, 0)
    assert ended.status_reason is not None and "exit code 75" in ended.status_reason
    tried = attempts(service.factory, job_id)
    assert [(a.capacity_type, a.end_reason, a.exit_code) for a in tried] == [
        ("spot", "failed", 75)
    ] * 3
    # The pools it ran in learned spot hours, never a preemption: every team's quotes read them.
    with service.factory() as session:
        recent, window = pool_histories(session, now=_now())
    for attempt in tried:
        pool = (attempt.zone, attempt.instance_type)
        for learned in (recent, window):
            assert learned[pool].preemptions == 0, pool


@on_postgres
def test_an_environment_no_process_can_hold_fails_the_job_at_its_first_launch(
    service: Service,
) -> None:
    job_id = service.submit(env={"HOSTILE_PROCESSES": "exit", "HOSTILE_EXIT_CODE": "0"})
    # Stored as a job accepted before the API refused such a value would be.
    with transaction(service.factory) as session:
        row = session.get(Job, job_id)
        assert row is not None
        spec = dict(row.spec)
        spec["env"] = {**spec["env"], "BAD": "a\x00b"}
        session.execute(update(Job).where(Job.id == job_id).values(spec=spec))

    ended = service.run(job_id, attempts_at_most=1)

    assert ended.status == JobStatus.FAILED.value
    assert ended.status_reason is not None and "env.BAD" in ended.status_reason
    [attempt] = attempts(service.factory, job_id)
    assert attempt.end_reason == "config_error" and attempt.cost_microusd == 0
    assert not (service.launcher.root / attempt.id / "pid").exists()  # nothing was started
    with service.factory() as session:
        tokens = list(session.scalars(select(ApiToken).where(ApiToken.job_id == job_id)))
    assert len(tokens) == 1 and tokens[0].revoked_at is not None


@needs_root
@on_postgres
def test_a_fork_bomb_meets_the_trainers_pid_limit_and_fails_its_job(service: Service) -> None:
    ceiling = 2 * MAX_PIDS  # the bomb's own stop, should no limit hold
    job_id = service.submit(
        env={"HOSTILE_PROCESSES": "forkbomb", "HOSTILE_FORKS": str(ceiling)},
        capacity={"types": ["on_demand"]},
        max_restarts=0,
    )
    schedule_once(service.cp)
    [attempt] = attempts(service.factory, job_id)
    report = service.launcher.root / attempt.id / "work" / REPORT
    wait_for(report.exists, "the fork bomb's report")
    bomb = json.loads(report.read_text())
    # Its children still hold their pids: the uid has no more processes than the limit.
    held = _processes_of(bomb["uid"])
    assert bomb["errno"] == errno.EAGAIN, bomb
    assert bomb["children"] < MAX_PIDS and len(held) <= MAX_PIDS, (bomb, len(held))
    # The machine still starts processes.
    assert subprocess.run(["true"], check=False).returncode == 0

    ended = service.run(job_id, attempts_at_most=1)

    assert ended.status == JobStatus.FAILED.value, ended.status_reason
    wait_for(lambda: not _processes_of(bomb["uid"]), "the bomb's processes to be killed")


def _hold_standby(service: Service, job_id: str) -> str:
    """A standby beside the running attempt, where it runs: how it was placed is the
    scheduler's business (tests/worker/test_handover.py), not this attack's."""
    with transaction(service.factory) as session:
        row = session.get(Job, job_id)
        assert row is not None
        [running] = session.scalars(
            select(JobAttempt).where(JobAttempt.job_id == job_id, JobAttempt.ended_at.is_(None))
        )
        standby = JobAttempt.placed(
            running.placement,
            id=new_id(),
            job_id=job_id,
            team_id=row.team_id,
            number=row.attempts_count + 1,
            checkpoint_every_seconds=running.checkpoint_every_seconds,
            resume_from_step=row.resume_from_step,
            standby=True,
        )
        session.add(standby)
        row.attempts_count += 1
        return standby.id


def _alive(pid: int, started: str) -> bool:
    return start_time(pid) == started


@on_postgres
def test_a_released_attempts_leftover_is_gone_before_its_standby_takes_over(
    service: Service,
) -> None:
    job_id = service.submit(
        env={"HOSTILE_PROCESSES": "leftover"}, capacity={"types": ["on_demand"]}, max_restarts=0
    )
    schedule_once(service.cp)
    [released] = attempts(service.factory, job_id)
    checkpoints = Path(str(job(service.factory, job_id).checkpoint_uri))
    pid_file, log = checkpoints / LEFTOVER_PID, checkpoints / LEFTOVER_LOG
    wait_for(lambda: reconcile_once(service.cp) >= 0 and pid_file.exists(), "the leftover")
    pid, started = pid_file.read_text().split()
    leftover = int(pid)
    wait_for(lambda: log.exists() and log.stat().st_size > 0, "the leftover to write")
    # Nothing ties it to its attempt but its ancestry: not its session, directory or environment.
    directory = service.launcher.root / released.id
    supervisor = json.loads((directory / "pid").read_text())
    assert os.getsid(leftover) != supervisor["pid"]
    assert os.readlink(f"/proc/{leftover}/cwd") == str(checkpoints)
    assert Path(f"/proc/{leftover}/environ").read_bytes() == b""

    standby_id = _hold_standby(service, job_id)

    def standby_running() -> bool:
        reconcile_once(service.cp)
        return attempts(service.factory, job_id)[-1].running_at is not None

    wait_for(standby_running, "the standby to run")
    # Its trainer asked whether to go (api.jobs.service.standby_answer records this): the
    # running attempt is released.
    with transaction(service.factory) as session:
        standby = session.get(JobAttempt, standby_id)
        assert standby is not None
        standby.ready_at = _now()

    def handed_over() -> bool:
        reconcile_once(service.cp)
        standby = attempts(service.factory, job_id)[-1]
        if standby.standby:  # not yet: the leftover may live until the launcher has seen it go
            return False
        # The moment the standby may train, nothing of the released attempt runs or writes.
        assert not _alive(leftover, started), "the standby took over beside a live leftover"
        return True

    wait_for(handed_over, "the handover")
    written = log.stat().st_size
    first, second = attempts(service.factory, job_id)
    assert (first.id, first.end_reason) == (released.id, "handed_over")
    assert second.id == standby_id and second.ended_at is None
    assert not _alive(supervisor["pid"], supervisor["start"])
    assert not attempt_processes(directory)
    notes = [e.reason or "" for e in events(service.factory, job_id)]
    assert any("were killed before the handover" in note for note in notes), notes
    # The standby's own passes go on; nothing more is ever written by the released attempt.
    reconcile_once(service.cp)
    assert log.stat().st_size == written

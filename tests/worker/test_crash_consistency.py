"""A stop survives a server crash: cancel a running job, SIGKILL the server (API and control
loops in one process) before the stop completes, start a new one on the same state, and check
that the job's processes are gone and its attempt was closed only after they were, billed to
the end. The trainer here ignores SIGTERM, so only the stop's escalation can end it."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import select

from api.database import make_engine, make_session_factory
from api.models import JobAttempt
from api.money import cost_microusd
from api.settings import Settings
from tests.api.test_load import (  # noqa: F401
    Server,
    database,
    server_home,
    start_server,
    stop_server,
)

NOTICE_S = 6


def attempt_processes(directory: Path) -> list[int]:
    """Live processes started in the attempt's directory (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") != str(directory):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            found.append(int(entry.name))
    return found


def wait_for(predicate, what: str, timeout: float = 90.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def the_attempt(tmp_path: Path, url: str, job_id: str) -> JobAttempt:
    settings = Settings(home=server_home(tmp_path), database_url=url)
    engine = make_engine(settings)
    try:
        with make_session_factory(engine)() as session:
            return session.scalars(select(JobAttempt).where(JobAttempt.job_id == job_id)).one()
    finally:
        engine.dispose()


def test_a_cancel_survives_a_server_crash_and_nothing_runs_unbilled(
    tmp_path: Path,
    database: str,  # noqa: F811
) -> None:
    options = {"GPUJOBS_TEST_TRAINER": "stubborn", "GPUJOBS_SPOT_NOTICE_S": str(NOTICE_S)}
    first = start_server(tmp_path, database, budget_usd=None, **options)
    second: Server | None = None
    directory: Path | None = None
    try:
        submitted = httpx.post(
            first.url + "/v1/jobs",
            json={"name": "stubborn", "trainer": {"steps": 10}, "estimated_hours": 1.0},
            headers=first.auth,
            timeout=30,
        )
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        attempts = first.home / "attempts"
        directory = wait_for(
            lambda: next(iter(attempts.glob("*/trainer.log")), None), "the launch"
        ).parent
        log = directory / "trainer.log"
        wait_for(lambda: "ignoring SIGTERM" in log.read_text(), "the trainer to start")
        running = attempt_processes(directory)
        assert running

        cancelled = httpx.post(f"{first.url}/v1/jobs/{job_id}/cancel", headers=first.auth)
        assert cancelled.status_code == 200
        # The reconciler sent the stop (SIGTERM, ignored) and recorded its deadline: crash now.
        deadline_file = wait_for(
            lambda: (directory / "stop_deadline").exists() and directory / "stop_deadline",
            "the stop to be sent",
        )
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=30)
        killed_at = datetime.now(UTC)
        stop_deadline = datetime.fromtimestamp(float(deadline_file.read_text()), UTC)
        assert killed_at < stop_deadline, "the server must die before the stop completes"
        assert attempt_processes(directory), "the trainer outlived the crash (it ignores SIGTERM)"
        # Still running, still open: the attempt is not closed while its processes live.
        assert the_attempt(tmp_path, database, job_id).ended_at is None

        second = start_server(tmp_path, database, budget_usd=None, **options)
        closed = wait_for(
            lambda: (row := the_attempt(tmp_path, database, job_id)).ended_at is not None and row,
            "the attempt to be closed",
        )
        assert not attempt_processes(directory)  # escalated to SIGKILL by the new server
        assert not any(_alive(pid) for pid in running)
        assert closed.end_reason == "cancelled"
        ended = (
            closed.ended_at.replace(tzinfo=UTC)
            if closed.ended_at.tzinfo is None
            else closed.ended_at
        )
        # The trainer ignored SIGTERM, so it ran at least until the stop's deadline: the
        # attempt's time, and its cost, cover that whole life.
        assert ended >= stop_deadline
        assert closed.started_at is not None
        assert closed.cost_microusd == cost_microusd(
            price_per_hour=closed.price_per_hour,
            started_at=closed.started_at,
            ended_at=closed.ended_at,
        )
        assert closed.cost_microusd and closed.cost_microusd > 0
        job = httpx.get(f"{second.url}/v1/jobs/{job_id}", headers=second.auth).json()
        assert job["status"] == "CANCELLED"
    finally:
        if first.process.poll() is None:
            first.process.kill()
        if second is not None:
            stop_server(second)
        if directory is not None:
            for pid in attempt_processes(directory):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"

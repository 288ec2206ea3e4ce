"""Crashes of the control plane lose and duplicate nothing; cancel stops the processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devstack.stack import Stack, wait_for
from tests.e2e.test_preemption_recovery import trainer_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _on_demand(name: str, steps: int) -> dict[str, object]:
    return {
        "name": name,
        "trainer": trainer_spec(steps=steps),
        "capacity": {"types": ["on_demand"]},
        "deadline_hours": 4,
        "estimated_hours": 0.02,
    }


def test_worker_killed_mid_launch_and_redis_restart_lose_nothing(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = make_stack(trace=[1], tick_seconds=60)
    job_id = stack.submit(_on_demand("crashy", steps=500))
    # The moment the attempt exists the launch is under way: kill the worker with SIGKILL.
    wait_for(lambda: stack.job(job_id)["attempts"] >= 1, timeout=60, what="a placement", every=0.05)
    stack.kill("worker")
    stack.start_worker()
    stack.wait_status(job_id, {"RUNNING"}, timeout=120)
    # Redis goes away and comes back while the job runs; beat and the worker reconnect.
    stack.redis.stop()
    stack.redis.start()
    job = stack.wait_status(job_id, {"SUCCEEDED", "FAILED"}, timeout=240)
    assert job["status"] == "SUCCEEDED", stack.diagnostics(job_id)
    attempts = stack.attempts(job_id)
    assert len(attempts) == 1, attempts  # no duplicate attempt
    assert attempts[0]["end_reason"] == "succeeded"
    launched = list((stack.home / "attempts").glob("*/pid"))
    assert len(launched) == 1  # and only one process group was ever started
    statuses = [(e["from_status"], e["to_status"]) for e in stack.events(job_id)]
    assert statuses == [
        (None, "PENDING"),
        ("PENDING", "SCHEDULED"),
        ("SCHEDULED", "RUNNING"),
        ("RUNNING", "SUCCEEDED"),
    ]
    # Whatever the Redis restart did to the worker (Celery usually reconnects; if it exits, it is
    # restarted like a Deployment would be), nothing was lost or done twice.


def test_cancel_while_running_stops_the_processes_and_closes_the_ledger(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = make_stack(trace=[1], tick_seconds=60)
    job_id = stack.submit(_on_demand("to-cancel", steps=100_000))

    def training() -> bool:
        progress = stack.job(job_id)["progress"]
        return bool(progress and progress["step"] > 0)

    wait_for(training, timeout=120, what="training progress")
    with stack.client() as client:
        response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "CANCELLED"

    def closed() -> dict[str, object] | None:
        attempt = stack.attempts(job_id)[0]
        return attempt if attempt["ended_at"] else None

    attempt = wait_for(closed, timeout=60, what="the attempt to close")
    assert attempt["end_reason"] == "cancelled"
    assert attempt["cost"] > 0
    pid = json.loads(next((stack.home / "attempts").glob("*/pid")).read_text())["pid"]

    def group_gone() -> bool:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        return _only_zombies(pid)

    wait_for(group_gone, timeout=60, what="the trainer processes to exit")
    events = [(e["from_status"], e["to_status"]) for e in stack.events(job_id)]
    assert events[-1] == ("RUNNING", "CANCELLED")
    assert [e for e in events if e[1] == "CANCELLED"] == [("RUNNING", "CANCELLED")]
    assert stack.job(job_id)["status"] == "CANCELLED"


def _only_zombies(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True

"""Make-before-break on the real cluster: a job on on-demand is handed to spot without stopping.

The service runs with GPUJOBS_LAUNCHER=kubernetes and a spot market replaying a trace (1 = spot
available): spot is out when the job is submitted, so it starts on on-demand (its deadline leaves
no room to wait), and comes back a few seconds later. A standby Job is created beside the running
one; its trainer pod builds and waits at its gate. The running Job is deleted in the foreground:
SIGTERM reaches its trainer, which checkpoints the step it stopped at and exits; the standby then
continues from exactly that step. The final weights equal an uninterrupted run's in the same image.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from api.pricing.cost_model import LOCAL_RESTART_HOURS
from devstack.cluster import RealCluster
from devstack.s3server import S3Server
from devstack.stack import Stack
from devstack.workloads import trainer_steps_per_second
from tests.k8s.test_real_launcher import (
    ONE_THREAD,
    assert_same_weights,
    checkpoint_of,
    reference_weights,
    trainer_spec,
)
from worker.launchers.kubernetes.manifests import ATTEMPT_NUMBER_LABEL

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

# Spot is out for the first 20 s, then stays.
TRACE = [0] * 4 + [1] * 500
TICK_S = 5.0


def notes(stack: Stack, job_id: str) -> list[str]:
    """The job's events that change no status: standbys held and lost, handovers."""
    return [e["reason"] for e in stack.events(job_id) if e["from_status"] == e["to_status"]]


def test_a_job_moves_from_on_demand_to_spot_on_the_cluster_with_no_lost_step(
    make_k8s_stack: Callable[..., Stack], real_cluster: RealCluster, namespace: str,
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # A local cluster provisions no node: a new attempt costs what a local one does.
    stack = make_k8s_stack(
        trace=TRACE,
        tick_seconds=TICK_S,
        env={"GPUJOBS_RESTART_HOURS": str(LOCAL_RESTART_HOURS)},
    )
    # Sized from this machine's rate, as the local handover test is: about 150 s of training.
    # The rate is measured on the machine as it is now, and a pod may run 3x faster once the
    # load moves (one at 60 s finished in 19 s, before spot came back): the margin is wide.
    local = trainer_spec(1, corpus=str(Path(__file__).resolve().parents[2] / "api"))
    rate = trainer_steps_per_second(local, scratch=tmp_path, env=ONE_THREAD)
    work_s = 150
    trainer = trainer_spec(max(400, int(rate * work_s)), checkpoint={"every_steps": 1000})
    estimated = 10 * work_s / 3600
    spec: dict[str, Any] = {
        "name": "k8s-handover",
        "trainer": trainer,
        "capacity": {"types": ["spot", "on_demand"]},
        "estimated_hours": estimated,
        "deadline_hours": estimated + LOCAL_RESTART_HOURS + 2 / 3600,
        "env": ONE_THREAD,
    }
    job_id = stack.submit(spec)
    at_once: list[set[str]] = []

    def done() -> dict[str, Any] | None:
        jobs = real_cluster.batch.list_namespaced_job(namespace).items
        at_once.append({(j.metadata.labels or {}).get(ATTEMPT_NUMBER_LABEL, "?") for j in jobs})
        found = stack.job(job_id)
        return found if found["status"] in {"SUCCEEDED", "FAILED", "CANCELLED"} else None

    job = real_cluster.wait(done, timeout=480, what="the job to end")
    assert job["status"] == "SUCCEEDED", stack.diagnostics(job_id)
    attempts = stack.attempts(job_id)
    assert [(a["capacity_type"], a["end_reason"], a["standby"]) for a in attempts] == [
        ("on_demand", "handed_over", False),
        ("spot", "succeeded", False),
    ], stack.diagnostics(job_id)
    # Each attempt was a Job of its own on the cluster, both there at once (the standby beside).
    assert {"1", "2"} in at_once, at_once
    old, new = attempts
    assert old["steps_lost"] == 0, stack.diagnostics(job_id)
    assert new["resume_from_step"] and new["resume_from_step"] > 0, stack.diagnostics(job_id)
    assert job["preemptions"] == 0 and job["restarts"] == 0, job
    said = notes(stack, job_id)
    assert any(n.startswith("handed over at step ") and "0 steps lost" in n for n in said), said
    statuses = [e["to_status"] for e in stack.events(job_id) if e["from_status"] != e["to_status"]]
    assert statuses == ["PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED"]  # it never stopped
    ours = checkpoint_of(s3_server, stack.checkpoint_uri(job_id), monkeypatch)
    assert_same_weights(ours, reference_weights(trainer, tmp_path))

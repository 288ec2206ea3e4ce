"""The whole service with GPUJOBS_LAUNCHER=kubernetes on the real local cluster: a job submitted
over HTTP runs as a trainer pod, its log follows through the API, a cloud-style eviction is a
preemption (not a failure), the job resumes in a new pod and its weights download.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from devstack.cluster import RealCluster
from devstack.s3server import S3Server
from devstack.stack import Stack
from tests.k8s.test_real_launcher import reference_weights, steps_in, trainer_spec
from trainer.checkpoint.reader import load_latest

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]


def follow_log(stack: Stack, job_id: str, *, timeout: float) -> list[str]:
    lines: list[str] = []
    with (
        stack.client() as client,
        client.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"},
                      timeout=httpx.Timeout(10, read=timeout)) as response,
    ):  # fmt: skip
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            lines.append(line)
    return lines


def wait_for_pod(cluster: RealCluster, namespace: str, *, phase: str = "Running") -> str:
    def running() -> str | None:
        pods = cluster.core.list_namespaced_pod(namespace).items
        live = [
            p for p in pods if p.status.phase == phase and p.metadata.deletion_timestamp is None
        ]
        return live[0].metadata.name if live else None

    name: str = cluster.wait(running, timeout=240, what=f"a {phase} trainer pod")
    return name


def test_a_job_through_the_api_runs_as_a_pod_follows_its_log_and_succeeds(
    k8s_stack: Stack, real_cluster: RealCluster, namespace: str
) -> None:
    spec: dict[str, Any] = {
        "name": "k8s-first",
        "trainer": trainer_spec(200),
        "capacity": {"types": ["on_demand"]},
        "env": {"OMP_NUM_THREADS": "1"},
    }
    job_id = k8s_stack.submit(spec)
    wait_for_pod(real_cluster, namespace)
    lines = follow_log(k8s_stack, job_id, timeout=300)
    job = k8s_stack.wait_status(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=120)
    assert job["status"] == "SUCCEEDED", k8s_stack.diagnostics(job_id)
    assert steps_in(lines) and steps_in(lines)[-1] == 200, lines[-10:]
    with k8s_stack.client() as client:
        listing = client.get(f"/v1/jobs/{job_id}/artifacts")
        assert listing.status_code == 200, listing.text


def test_an_evicted_pod_is_a_preemption_and_the_job_resumes_to_the_same_weights(
    k8s_stack: Stack, real_cluster: RealCluster, namespace: str, s3_server: S3Server,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    steps = 1500
    spec: dict[str, Any] = {
        "name": "k8s-evicted",
        "trainer": trainer_spec(steps),
        "capacity": {"types": ["spot", "on_demand"]},
        "env": {"OMP_NUM_THREADS": "1"},
        "max_restarts": 0,
    }
    job_id = k8s_stack.submit(spec)
    pod = wait_for_pod(real_cluster, namespace)

    def trained() -> bool:
        return bool((k8s_stack.job(job_id).get("progress") or {}).get("step"))

    real_cluster.wait(trained, timeout=240, what="a progress report")
    real_cluster.evict(namespace, pod)
    job = k8s_stack.wait_status(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=480)
    assert job["status"] == "SUCCEEDED", k8s_stack.diagnostics(job_id)
    attempts = k8s_stack.attempts(job_id)
    assert [a["end_reason"] for a in attempts] == ["preempted", "succeeded"], attempts
    assert job["preemptions"] == 1 and job.get("restarts", 0) == 0, job
    assert attempts[0]["steps_lost"] in (0, None), attempts
    assert (attempts[1]["resume_from_step"] or 0) > 0, attempts
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    ours = load_latest(k8s_stack.checkpoint_uri(job_id))
    theirs = reference_weights(trainer_spec(steps), tmp_path)
    assert ours is not None and theirs is not None and ours.step == theirs.step == steps
    for name, tensor in theirs.shared["model"].items():
        assert torch.equal(ours.shared["model"][name], tensor), name
    # The weights download through the API.
    with k8s_stack.client() as client:
        listing = client.get(f"/v1/jobs/{job_id}/artifacts").json()
    assert listing, listing

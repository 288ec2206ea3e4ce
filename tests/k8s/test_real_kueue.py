"""The Kubernetes launcher through Kueue on the real cluster: Kueue's own manager (built from
the Go module proxy, run by scripts/cluster/kueue.sh) admits, holds and preempts the Jobs; the
last test drives the whole service (GPUJOBS_K8S_KUEUE_QUEUE) and reads it with `gpujobs`.

The ClusterQueue "gpujobs" has 2 GPUs of quota (1 per flavor, spot and on-demand) and lets a
higher priority preempt a lower one; each test makes its LocalQueue in its own namespace.
"""

from __future__ import annotations

import io
import json
import subprocess
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devstack.cluster import SCRIPTS, RealCluster, cluster_setting
from devstack.stack import Stack
from gpujobs.cli import main
from tests.k8s.test_real_launcher import request, trainer_spec, wait_state
from worker.launchers.base import Observation, ObservedState
from worker.launchers.kubernetes import KubernetesLauncher, kueue
from worker.launchers.kubernetes.config import TrainerResources

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

QUEUE = "gpujobs"
HIGH = "gpujobs-kueue-high"  # the PriorityClass scripts/cluster/kueue.sh makes
# Long enough to still train when the test is over (it cancels them); a quarter of a core
# each (guaranteed: the limit is the request), so three trainers leave the machine usable.
STEPS = 1_000_000
SMALL = TrainerResources(
    cpu_per_gpu=0.25, memory_gib_per_gpu=1.0, shm_size_gib=0.25, guaranteed=True
)


@pytest.fixture(scope="session")
def kueue_running(real_cluster: RealCluster) -> None:
    """Kueue's manager and queues (idempotent). Built by `make kueue`: a cold build of its
    manager takes many minutes, more than a test's timeout."""
    built = f"{cluster_setting('BIN_DIR')}/kueue"
    if subprocess.run(["test", "-x", built]).returncode != 0:
        # make test builds it first (scripts/run-tests.sh)
        pytest.fail(f"Kueue is not built ({built} is missing): run `make kueue` first")
    done = subprocess.run(["bash", str(SCRIPTS / "kueue.sh")], capture_output=True, text=True)
    assert done.returncode == 0, f"kueue.sh failed:\n{done.stderr[-4000:]}"


@pytest.fixture
def queue(real_cluster: RealCluster, namespace: str, kueue_running: None) -> str:
    """A LocalQueue in the test's namespace (deleted with it), pointing at the ClusterQueue."""
    body = {
        "apiVersion": f"{kueue.GROUP}/{kueue.VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": QUEUE},
    }
    custom = client.CustomObjectsApi(real_cluster.api)
    custom.create_namespaced_custom_object(
        kueue.GROUP, kueue.VERSION, namespace, "localqueues", body
    )
    return QUEUE


def launch(launcher: KubernetesLauncher, pod_s3: str, store: str) -> str:
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    trainer = trainer_spec(STEPS)
    return launcher.launch(
        request(trainer=trainer, checkpoint_uri=f"{store}/{job_id}", s3_url=pod_s3, job_id=job_id)
    )


def suspended(cluster: RealCluster, handle: str) -> bool:
    namespace, name = handle.split("/")
    return bool(cluster.batch.read_namespaced_job(name, namespace).spec.suspend)


def job_exists(cluster: RealCluster, handle: str) -> bool:
    namespace, name = handle.split("/")
    try:
        cluster.batch.read_namespaced_job(name, namespace)
    except ApiException as exc:
        assert exc.status == 404
        return False
    return True


def stop(cluster: RealCluster, launcher: KubernetesLauncher, namespace: str, *handles: str) -> None:
    """Cancel and wait for the pods to be gone: a terminating pod still holds its node's GPUs
    (not Kueue's quota), and the next test's Jobs would find fewer than Kueue admits."""
    for handle in handles:
        launcher.cancel(handle)
    cluster.wait(
        lambda: not cluster.core.list_namespaced_pod(namespace).items,
        timeout=120,
        what="the cancelled trainers' pods to be gone",
    )


def test_kueue_admits_within_quota_holds_a_job_beyond_it_and_admits_it_once_quota_frees(
    real_cluster: RealCluster, namespace: str, queue: str, pod_s3: str, store: str
) -> None:  # fmt: skip
    launcher = real_cluster.launcher(namespace, kueue_queue=queue, resources=SMALL)
    first, second = launch(launcher, pod_s3, store), launch(launcher, pod_s3, store)
    for handle in (first, second):
        # Created suspended by the launcher; Kueue unsuspends it, the trainer starts.
        wait_state(real_cluster, launcher, handle, {ObservedState.RUNNING}, timeout=180)
        assert not suspended(real_cluster, handle)

    third = launch(launcher, pod_s3, store)

    def held() -> Observation | None:
        observation = launcher.status(third)
        told = observation.message is not None and "insufficient" in observation.message
        return observation if told else None

    # Kueue's word on the quota reaches the observation, with the queue and what it asks for.
    waiting = real_cluster.wait(held, timeout=60, what="Kueue's word on the third Job")
    assert waiting.state is ObservedState.PENDING, waiting
    assert waiting.message is not None
    assert f"waiting for Kueue quota in queue {queue}" in waiting.message, waiting.message
    assert "nvidia.com/gpu: 1" in waiting.message, waiting.message
    assert suspended(real_cluster, third)
    assert real_cluster.pods(namespace, third.split("/")[1]) == []

    launcher.cancel(first)  # its quota frees once its Job is gone
    wait_state(real_cluster, launcher, third, {ObservedState.RUNNING}, timeout=180)
    assert not suspended(real_cluster, third)
    assert launcher.status(second).state is ObservedState.RUNNING
    stop(real_cluster, launcher, namespace, second, third)


def test_a_higher_priority_takes_the_quota_and_the_job_kueue_evicts_reads_as_preempted(
    real_cluster: RealCluster, namespace: str, queue: str, pod_s3: str, store: str
) -> None:  # fmt: skip
    low = real_cluster.launcher(namespace, kueue_queue=queue, resources=SMALL)
    high = real_cluster.launcher(
        namespace, kueue_queue=queue, resources=SMALL, priority_class_name=HIGH
    )
    running = [launch(low, pod_s3, store), launch(low, pod_s3, store)]
    for handle in running:
        wait_state(real_cluster, low, handle, {ObservedState.RUNNING}, timeout=180)

    urgent = launch(high, pod_s3, store)
    ends = {ObservedState.PREEMPTED, ObservedState.FAILED, ObservedState.NO_CAPACITY}

    def one_ended() -> tuple[str, Observation] | None:
        for handle in running:
            observation = low.status(handle)
            if observation.state in ends:
                return handle, observation
        return None

    # Kueue evicts one of them (suspends its Job); once its pod stopped, a preemption.
    preempted, observation = real_cluster.wait(one_ended, timeout=180, what="an eviction")
    assert observation.state is ObservedState.PREEMPTED, observation
    # Kueue's eviction, not the scheduler's (the node has GPUs enough for all three pods).
    assert observation.message is not None, observation
    assert observation.message.startswith("evicted by Kueue: Preempted: "), observation
    # The launcher deleted the Job, which Kueue would otherwise run again once quota frees.
    real_cluster.wait(
        lambda: not job_exists(real_cluster, preempted), timeout=60, what="the Job to go"
    )
    wait_state(real_cluster, high, urgent, {ObservedState.RUNNING}, timeout=180)
    (spared,) = [handle for handle in running if handle != preempted]
    assert low.status(spared).state is ObservedState.RUNNING
    stop(real_cluster, low, namespace, spared, urgent)


def gpujobs(stack: Stack, *argv: str) -> str:
    """The `gpujobs` command against the stack's API, every column in full."""
    out = io.StringIO()
    code = main([*argv, "--url", stack.url, "--token", stack.token, "--wide"], out=out)
    assert code == 0, out.getvalue()
    return out.getvalue()


def test_through_the_service_a_job_beyond_the_quota_says_it_waits_for_kueue_and_runs_once_it_frees(
    make_k8s_stack: Callable[..., Stack], real_cluster: RealCluster, namespace: str, queue: str
) -> None:  # fmt: skip
    stack = make_k8s_stack(trace=[1] * 100, tick_seconds=60, env={"GPUJOBS_K8S_KUEUE_QUEUE": queue})

    def spec(name: str, steps: int) -> dict[str, Any]:
        return {
            "name": name,
            "trainer": trainer_spec(steps),
            "capacity": {"types": ["on_demand"]},
            "env": {"OMP_NUM_THREADS": "1"},
        }

    # Two jobs of one GPU each take the queue's whole quota (one GPU per flavor)...
    first, second = stack.submit(spec("quota-1", STEPS)), stack.submit(spec("quota-2", STEPS))
    for job_id in (first, second):
        stack.wait_status(job_id, {"RUNNING"}, timeout=240)
    # ... and a third waits for it, its Job suspended.
    third = stack.submit(spec("beyond-quota", 50))
    waits = f"suspended: waiting for Kueue quota in queue {queue} (asks 1 pod(s), each {{"

    def held() -> str | None:
        shown = gpujobs(stack, "show", third)
        return shown if f"SCHEDULED ({waits}" in shown and "insufficient" in shown else None

    shown = real_cluster.wait(held, timeout=120, what="the third job to say Kueue holds it")
    assert "nvidia.com/gpu: 1" in shown, shown
    assert stack.job(third)["attempts"] == 1
    # Its events say the wait once, and again only when Kueue's word changed, never per pass.
    told = [
        e for e in json.loads(gpujobs(stack, "events", third, "--json")) if e["data"].get("held")
    ]
    reasons = [e["reason"] for e in told]
    assert reasons and all(waits in r for r in reasons), reasons
    assert len(reasons) == len(set(reasons)), reasons
    assert any("insufficient" in reason for reason in reasons), reasons
    assert waits in gpujobs(stack, "events", third)

    # The first ends: its quota frees, Kueue admits the third, which runs to its end.
    gpujobs(stack, "cancel", first)
    job = stack.wait_status(third, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=300)
    assert job["status"] == "SUCCEEDED", stack.diagnostics(third)
    assert [a["end_reason"] for a in stack.attempts(third)] == ["succeeded"]  # waited, not retried
    changes = [(e["from_status"], e["to_status"]) for e in stack.events(third)]
    assert ("SCHEDULED", "RUNNING") in changes, changes
    assert "status:           SUCCEEDED" in gpujobs(stack, "show", third)

    gpujobs(stack, "cancel", second)
    for job_id in (first, second):
        stack.wait_status(job_id, {"CANCELLED"}, timeout=120)

    # A terminating pod still holds its node's GPUs: the next test would find fewer. (The third's
    # pod stays, Succeeded, until its Job's TTL.)
    def live_pods() -> list[str]:
        pods = real_cluster.core.list_namespaced_pod(namespace).items
        return [p.metadata.name for p in pods if p.status.phase in ("Pending", "Running")]

    real_cluster.wait(
        lambda: not live_pods(), timeout=120, what="the cancelled trainers' pods to be gone"
    )

"""The Kubernetes launcher against kmock's API emulator, over HTTP with the official client."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import kmock
import kubernetes_validate
import pytest
from kmock._internal import rendering
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.config import ConfigException

from gpujobs.resources import JobStatus
from tests.launchers.k8s_calls import WORKER_ENTRY_POINTS, call_of, launcher_calls
from worker.launchers.base import LaunchRefused, LaunchRequest, ObservedState
from worker.launchers.kubernetes import KubernetesLauncher, KubernetesLauncherConfig
from worker.launchers.kubernetes.observe import scale_up_refused
from worker.log_reader import log_reader
from worker.outcomes import outcome

if TYPE_CHECKING:
    from conftest import Cluster

NS = "gpujobs-test"
RequestFactory = Callable[..., LaunchRequest]


def job_of(handle: str) -> str:
    return handle.split("/")[1]


def exists(read: Callable[[str, str], object], name: str) -> bool:
    try:
        read(name, NS)
    except ApiException as exc:
        assert exc.status == 404
        return False
    return True


# -- launch ------------------------------------------------------------------------------------


def test_launch_creates_job_service_and_secret(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    handle = cluster.launcher().launch(make_request(nodes=2, gpus_per_node=4))

    name = job_of(handle)
    assert handle == f"{NS}/{name}"
    job = cluster.batch.read_namespaced_job(name, NS)
    assert job.metadata.labels["gpujobs.dev/attempt-id"] == "att-7f3a-1"
    assert job.metadata.labels["gpujobs.dev/job-id"] == "job-7f3a"
    assert job.metadata.labels["gpujobs.dev/team"] == "research"
    assert job.metadata.labels["app.kubernetes.io/managed-by"] == "gpujobs"
    assert job.spec.completions == job.spec.parallelism == 2
    container = job.spec.template.spec.containers[0]
    assert container.resources.limits == {"nvidia.com/gpu": "4"}
    service = cluster.core.read_namespaced_service(name, NS)
    assert service.spec.cluster_ip == "None"
    assert service.spec.selector.items() <= job.spec.template.metadata.labels.items()
    secret = cluster.core.read_namespaced_secret(f"gpujobs-token-{name}", NS)
    # Both die with the Job: owned through its uid.
    for owned in (service, secret):
        (owner,) = owned.metadata.owner_references
        assert (owner.kind, owner.name, owner.uid) == ("Job", name, job.metadata.uid)
    # What ends up stored, owner references included, is valid for the API.
    for stored in (job, service, secret):
        kubernetes_validate.validate(
            cluster.api.sanitize_for_serialization(stored), "1.33.0", strict=True
        )


def test_single_node_launch_has_no_service(cluster: Cluster, make_request: RequestFactory) -> None:
    handle = cluster.launcher().launch(make_request(nodes=1))
    assert exists(cluster.batch.read_namespaced_job, job_of(handle))
    assert not exists(cluster.core.read_namespaced_service, job_of(handle))


def test_launch_twice_returns_the_same_handle(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    first = launcher.launch(make_request(nodes=2))
    # Another process retrying the same attempt, e.g. after a crash between launch and commit.
    second = cluster.launcher().launch(make_request(nodes=2))

    assert first == second
    jobs = cluster.batch.list_namespaced_job(NS).items
    assert [j.metadata.name for j in jobs] == [job_of(first)]
    assert len(cluster.core.list_namespaced_service(NS).items) == 1
    assert len(cluster.core.list_namespaced_secret(NS).items) == 1


def test_different_attempts_get_different_jobs(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    first = launcher.launch(make_request(attempt_id="att-1", attempt_number=1))
    second = launcher.launch(make_request(attempt_id="att-2", attempt_number=2))
    assert first != second
    assert len(cluster.batch.list_namespaced_job(NS).items) == 2


def test_launch_refuses_a_job_of_another_attempt(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(attempt_id="att-1"))
    cluster.batch.patch_namespaced_job(
        job_of(handle), NS, {"metadata": {"labels": {"gpujobs.dev/attempt-id": "att-other"}}}
    )
    with pytest.raises(RuntimeError, match="another attempt"):
        launcher.launch(make_request(attempt_id="att-1"))


# -- status ------------------------------------------------------------------------------------


def test_status_follows_pods_from_pending_to_success(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    assert launcher.status(handle).state is ObservedState.PENDING

    pods = cluster.start_pods(handle)
    assert launcher.status(handle).state is ObservedState.PENDING
    cluster.set_pod_status(pods[0], cluster.running())
    # One rank up is not training yet.
    assert launcher.status(handle).state is ObservedState.PENDING
    cluster.set_pod_status(pods[1], cluster.running())
    assert launcher.status(handle).state is ObservedState.RUNNING

    for pod in pods:
        cluster.set_pod_status(pod, cluster.terminated(0, reason="Completed"))
    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.SUCCEEDED, 0)


def test_complete_condition_means_succeeded(cluster: Cluster, make_request: RequestFactory) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    cluster.set_job_conditions(handle, cluster.condition("Complete", "True", "CompletionsReached"))
    assert launcher.status(handle).state is ObservedState.SUCCEEDED


def test_failure_reports_the_exit_code(cluster: Cluster, make_request: RequestFactory) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.terminated(137, reason="OOMKilled"))
    cluster.set_job_conditions(
        handle,
        cluster.condition(
            "Failed", "True", "BackoffLimitExceeded", message="Job has reached the backoff limit"
        ),
    )

    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.FAILED, 137)
    assert observation.message is not None
    assert "OOMKilled" in observation.message and "BackoffLimitExceeded" in observation.message


def test_an_environment_no_container_can_hold_is_refused_before_anything_is_created(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """A spec stored before the API refused a NUL in an env value: the launch can never work,
    and says so (LaunchRefused: the job fails, no retry mints another token)."""
    launcher = cluster.launcher()
    with pytest.raises(LaunchRefused, match=r"env\.BAD: .*NUL"):
        launcher.launch(make_request(env={"BAD": "a\x00b"}))
    assert cluster.requests("POST") == []


def test_failed_pod_is_a_failure_before_the_job_says_so(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.terminated(1))
    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.FAILED, 1)


@pytest.mark.parametrize("exit_code", [75, 76])
def test_an_exit_as_after_a_notice_without_a_disruption_is_a_failure(
    cluster: Cluster, make_request: RequestFactory, exit_code: int
) -> None:
    """75 is what the trainer exits with after a notice, and a team's code can exit 75 at any
    time: without the pod's DisruptionTarget it is a failure, which spends a restart and teaches
    no pool a preemption."""
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.terminated(exit_code))
    before = launcher.status(handle)  # the Job controller has not written Failed yet
    assert (before.state, before.exit_code) == (ObservedState.FAILED, exit_code)

    cluster.fail_by_policy(handle, pod, exit_code=exit_code, disrupted=False)

    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.FAILED, exit_code)
    assert observation.message is not None and f"exit code {exit_code}" in observation.message
    result = outcome(
        observation=observation,
        job_status=JobStatus.RUNNING,
        stop_reason=None,
        restarts=0,
        max_restarts=3,
    )
    assert result.failure and not result.preempted


def test_the_rule_an_exit_without_a_disruption_fires_is_a_failure_even_without_pods(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    cluster.fail_by_policy(handle, f"{handle.split('/')[1]}-0-abcde", exit_code=75, disrupted=False)
    assert launcher.status(handle).state is ObservedState.FAILED


def test_disruption_is_running_until_the_pod_stops_then_preempted(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.running())
    disruption = cluster.condition(
        "DisruptionTarget",
        "True",
        "EvictionByEvictionAPI",
        message="Eviction API: evicting (Karpenter: spot interruption)",
    )
    # The notice: SIGTERM sent, the trainer is writing its checkpoint.
    cluster.set_pod_status(pod, {"conditions": [{"type": "Ready", "status": "True"}, disruption]})
    observation = launcher.status(handle)
    assert observation.state is ObservedState.RUNNING
    assert observation.message is not None and "disrupted" in observation.message

    cluster.set_pod_status(pod, cluster.terminated(143))
    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.PREEMPTED, 143)
    assert observation.message is not None and "EvictionByEvictionAPI" in observation.message


def test_ranks_stopped_after_a_crash_do_not_make_it_a_preemption(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    rank0, rank1 = cluster.start_pods(handle)
    # Rank 1 crashes; the Job controller then stops rank 0, which checkpoints and exits 75.
    cluster.set_pod_status(rank1, cluster.terminated(1, ago_s=30))
    cluster.set_pod_status(rank0, cluster.terminated(75, ago_s=5))
    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.FAILED, 1)

    cluster.set_job_conditions(
        handle,
        cluster.condition(
            "Failed", "True", "BackoffLimitExceeded", message="Job has reached the backoff limit"
        ),
    )
    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.FAILED, 1)
    assert observation.message is not None and rank1 in observation.message


def test_a_gang_whose_evicted_rank_is_gone_is_preempted_by_the_failure_target(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """What the real cluster does (tests/k8s): rank 1 is evicted; the Job controller writes
    FailureTarget (rule 0, the disruption), lets rank 1's pod go and stops rank 0, whose
    trainer checkpoints and exits 75; only once rank 0 has stopped does it write Failed. In
    between, the pods left show one exit 75 and no disruption: a failure, unless the
    FailureTarget condition is read."""
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    rank0, rank1 = cluster.start_pods(handle)
    cluster.set_pod_status(rank0, cluster.running())
    cluster.fail_by_policy(handle, rank1, exit_code=75, disrupted=True, condition="FailureTarget")
    cluster.core.delete_namespaced_pod(rank1, handle.split("/")[0])
    # Rank 0 is still checkpointing: the attempt holds its capacity and may still write.
    assert launcher.status(handle).state is not ObservedState.PREEMPTED

    cluster.set_pod_status(rank0, cluster.terminated(75))
    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.PREEMPTED, 75)
    assert observation.message is not None and "DisruptionTarget" in observation.message


def test_a_failure_target_of_the_exit_code_rule_is_a_failure(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """The same window when no rank was disrupted: a team's trainer exited 75 on its own."""
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    rank0, rank1 = cluster.start_pods(handle)
    cluster.fail_by_policy(handle, rank1, exit_code=75, disrupted=False, condition="FailureTarget")
    cluster.core.delete_namespaced_pod(rank1, handle.split("/")[0])
    cluster.set_pod_status(rank0, cluster.terminated(75))
    observation = launcher.status(handle)
    assert observation.state is ObservedState.FAILED


def test_ranks_crashing_because_a_node_vanished_is_a_preemption(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    rank0, rank1 = cluster.start_pods(handle)
    # Rank 0's spot node disappears without notice; rank 1 dies on an NCCL timeout first.
    cluster.set_pod_status(rank0, {"phase": "Unknown", "reason": "NodeLost"})
    cluster.set_pod_status(rank1, cluster.terminated(1))
    cluster.set_job_conditions(
        handle, cluster.condition("Failed", "True", "BackoffLimitExceeded", message="backoff")
    )
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PREEMPTED
    assert observation.message is not None and rank0 in observation.message


def test_job_failed_by_the_disruption_rule_is_preempted_even_without_pods(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """A reclaimed node's pods are deleted with it: only the Job's condition is left. Its pod
    had the notice (DisruptionTarget) and exited 75 after its checkpoint: the rule that fires
    for both must be read as the preemption it was."""
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    cluster.fail_by_policy(handle, f"{handle.split('/')[1]}-0-abcde", exit_code=75, disrupted=True)
    assert launcher.status(handle).state is ObservedState.PREEMPTED


def test_kubelet_eviction_is_a_failure_named_so_not_a_preemption(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """Node pressure: the kubelet evicts the pod (SIGTERM, so the trainer checkpoints and the
    supervisor exits 75, which the podFailurePolicy matches). Not a spot reclaim: it must not
    be learned as one."""
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    evicted = cluster.terminated(75)
    evicted.update(
        reason="Evicted",
        message="The node was low on resource: memory.",
        conditions=[
            cluster.condition(
                "DisruptionTarget", "True", "TerminationByKubelet", message="memory pressure"
            )
        ],
    )
    cluster.set_pod_status(pod, evicted)
    cluster.fail_by_policy(handle, pod, exit_code=75, disrupted=True)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.FAILED
    assert observation.message is not None
    assert "evicted by the kubelet" in observation.message
    assert "low on resource" in observation.message
    result = outcome(
        observation=observation,
        job_status=JobStatus.RUNNING,
        stop_reason=None,
        restarts=0,
        max_restarts=3,
    )
    assert not result.preempted


def test_pod_on_an_unreachable_node_is_preempted(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, {"phase": "Unknown", "reason": "NodeLost"})
    assert launcher.status(handle).state is ObservedState.PREEMPTED


def test_pod_on_a_deleted_node_is_preempted(cluster: Cluster, make_request: RequestFactory) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    cluster.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "spot-1"}})
    cluster.bind_pod(pod, "spot-1")
    not_ready = cluster.running()
    not_ready["conditions"] = [{"type": "Ready", "status": "False"}]
    cluster.set_pod_status(pod, not_ready)
    # Not ready on a node that still exists: a hiccup, not a preemption.
    assert launcher.status(handle).state is ObservedState.RUNNING

    cluster.core.delete_node("spot-1")  # the cloud reclaimed the instance
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PREEMPTED
    assert observation.message is not None and "spot-1" in observation.message


def test_unschedulable_beyond_the_timeout_is_no_capacity(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher(unschedulable_timeout_s=600)
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    message = "0/12 nodes are available: 12 node(s) didn't match Pod's node affinity/selector."

    def unschedulable_for(seconds: float) -> None:
        scheduled = cluster.condition(
            "PodScheduled", "False", "Unschedulable", ago_s=seconds, message=message
        )
        cluster.set_pod_status(pod, {"phase": "Pending", "conditions": [scheduled]})

    unschedulable_for(60)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PENDING
    assert observation.message is not None and "didn't match" in observation.message

    unschedulable_for(601)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.NO_CAPACITY
    assert observation.message is not None and "didn't match" in observation.message


def test_job_waiting_for_kueue_too_long_is_no_capacity(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    handle = cluster.launcher(kueue_queue="gpu").launch(make_request())
    assert cluster.launcher(kueue_queue="gpu").status(handle).state is ObservedState.PENDING

    later = datetime.now(UTC) + timedelta(seconds=601)
    launcher = cluster.launcher(kueue_queue="gpu", clock=lambda: later)
    assert launcher.status(handle).state is ObservedState.NO_CAPACITY


def test_a_job_waiting_for_kueue_says_its_queue_what_it_asks_and_kueues_word(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher(kueue_queue="gpu")
    handle = launcher.launch(make_request(nodes=2, gpus_per_node=4))
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PENDING
    assert observation.message is not None
    assert "waiting for Kueue quota in queue gpu" in observation.message
    assert "2 pod(s)" in observation.message and "nvidia.com/gpu: 4" in observation.message
    assert observation.held  # its job's status and events say it (worker.reconciler)

    full = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu"
    cluster.kueue_workload(
        handle, cluster.condition("QuotaReserved", "False", "Pending", message=full)
    )
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PENDING
    assert observation.message is not None and observation.message.endswith(full)


def test_a_job_kueue_evicts_for_a_higher_priority_is_a_preemption_once_its_pods_stopped(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher(kueue_queue="gpu")
    handle = launcher.launch(make_request())
    # Kueue admits it (unsuspends it) and the Job controller starts its pod.
    cluster.kueue_workload(handle, cluster.condition("QuotaReserved", "True", "QuotaReserved"))
    cluster.suspend(handle, False)
    (pod,) = cluster.start_pods(handle)
    cluster.set_pod_status(pod, cluster.running())
    assert launcher.status(handle).state is ObservedState.RUNNING

    # A higher priority takes the quota: Kueue evicts the Workload and suspends the Job; the
    # Job controller stops the pod, whose trainer checkpoints meanwhile.
    why = "Preempted to accommodate a workload (UID: 1234) due to prioritization in the queue"
    cluster.kueue_workload(
        handle,
        cluster.condition("QuotaReserved", "True", "QuotaReserved"),
        cluster.condition("Evicted", "True", "Preempted", message=why),
    )
    cluster.suspend(handle, True)
    stopping = launcher.status(handle)
    assert stopping.state is ObservedState.RUNNING, stopping

    # The trainer saved and exited 75 on the notice; the Job's own rule for that exit (it is no
    # preemption without a DisruptionTarget) fails the Job, as the Job controller does.
    cluster.set_pod_status(pod, cluster.terminated(75))
    cluster.fail_by_policy(handle, pod, exit_code=75, disrupted=False)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PREEMPTED, observation
    assert observation.exit_code == 75
    assert observation.message is not None and why in observation.message
    result = outcome(
        observation=observation,
        job_status=JobStatus.RUNNING,
        stop_reason=None,
        restarts=0,
        max_restarts=3,
    )
    assert result.preempted and not result.failure
    # Kueue would run the suspended Job again once quota frees, beside the resumed attempt.
    assert not exists(cluster.batch.read_namespaced_job, job_of(handle))


def test_missing_job_is_lost(cluster: Cluster) -> None:
    launcher = cluster.launcher()
    assert launcher.status(f"{NS}/gj-never-launched").state is ObservedState.LOST
    with pytest.raises(ValueError):
        launcher.status("not-a-handle")


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_deletes_the_attempt(cluster: Cluster, make_request: RequestFactory) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    name = job_of(handle)

    launcher.cancel(handle)

    assert not exists(cluster.batch.read_namespaced_job, name)
    assert not exists(cluster.core.read_namespaced_service, name)
    assert not exists(cluster.core.read_namespaced_secret, f"gpujobs-token-{name}")
    (delete_job,) = [r for r in cluster.requests("DELETE") if "/jobs/" in r.url.path]
    assert delete_job.data["propagationPolicy"] == "Foreground"
    assert launcher.status(handle).state is ObservedState.LOST
    launcher.cancel(handle)  # idempotent


def test_job_being_deleted_reads_cancelled(cluster: Cluster, make_request: RequestFactory) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    # What foreground deletion looks like: the Job stays, marked, until its pods are gone.
    cluster.batch.patch_namespaced_job(
        job_of(handle), NS, {"metadata": {"finalizers": ["foregroundDeletion"]}}
    )
    launcher.cancel(handle)
    assert exists(cluster.batch.read_namespaced_job, job_of(handle))
    assert launcher.status(handle).state is ObservedState.CANCELLED


# -- logs --------------------------------------------------------------------------------------


def test_logs_read_rank_zero(cluster: Cluster, make_request: RequestFactory) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    assert list(launcher.logs(handle)) == []  # no pods yet
    pods = cluster.start_pods(handle)
    cluster.emulator["get", kmock.subresource("log")] << b"step 1 loss 2.1\nstep 2 loss 1.9\n"

    assert list(launcher.logs(handle)) == ["step 1 loss 2.1\n", "step 2 loss 1.9\n"]
    (log_request,) = [r for r in cluster.requests("GET") if r.url.path.endswith("/log")]
    assert log_request.url.path == f"/api/v1/namespaces/{NS}/pods/{pods[0]}/log"
    assert log_request.params["container"] == "trainer"


def test_the_apis_reader_keeps_the_line_ends(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    # A real cluster showed it: GET /logs of a Kubernetes job ran every line into one.
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    cluster.start_pods(handle)
    cluster.emulator["get", kmock.subresource("log")] << b"step 1\nstep 2\n"

    read = log_reader(launcher)
    assert b"".join(chunk.data for chunk in read(handle)) == b"step 1\nstep 2\n"


def test_logs_follow_streams_lines(cluster: Cluster, make_request: RequestFactory) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    cluster.start_pods(handle)
    cluster.emulator["get", kmock.subresource("log")] << (b"step 1\n", b"step 2\n", b"done\n")

    assert list(launcher.logs(handle, follow=True)) == ["step 1\n", "step 2\n", "done\n"]
    (log_request,) = [r for r in cluster.requests("GET") if r.url.path.endswith("/log")]
    assert log_request.params["follow"].lower() == "true"


def test_logs_of_a_container_not_started_yet_are_empty(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher()
    handle = launcher.launch(make_request())
    cluster.start_pods(handle)
    waiting = {"kind": "Status", "code": 400, "message": "container is waiting to start"}
    cluster.emulator["get", kmock.subresource("log")] << 400 << waiting
    assert list(launcher.logs(handle)) == []


# -- the preemption promise, end to end on the API -----------------------------------------------


def test_spot_notice_ends_as_a_preempted_attempt_not_a_failed_one(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """Karpenter evicts the pod for a spot interruption: DisruptionTarget, SIGTERM to PID 1 (the
    supervisor), every rank checkpoints, the pod exits 75, the Job's podFailurePolicy disruption
    rule fires. The attempt closes as preempted: no restart spent, learned as a preemption."""
    launcher = cluster.launcher()
    handle = launcher.launch(make_request(nodes=2))
    pods = cluster.start_pods(handle)
    for pod in pods:
        cluster.set_pod_status(pod, cluster.running())
    assert launcher.status(handle).state is ObservedState.RUNNING

    disruption = cluster.condition(
        "DisruptionTarget", "True", "EvictionByEvictionAPI", message="Karpenter: spot interruption"
    )
    for pod in pods:
        cluster.set_pod_status(
            pod, {"conditions": [{"type": "Ready", "status": "True"}, disruption]}
        )
    # Checkpointing during the grace period: not over yet, nothing may start elsewhere.
    assert launcher.status(handle).state is ObservedState.RUNNING

    for pod in pods:
        cluster.set_pod_status(pod, {**cluster.terminated(75), "conditions": [disruption]})
    cluster.fail_by_policy(handle, pods[0], exit_code=75, disrupted=True)
    observation = launcher.status(handle)
    assert (observation.state, observation.exit_code) == (ObservedState.PREEMPTED, 75)
    result = outcome(
        observation=observation,
        job_status=JobStatus.RUNNING,
        stop_reason=None,
        restarts=0,
        max_restarts=0,  # no restart left: a failure would end the job
    )
    assert result.end_reason == "preempted" and result.preempted and not result.failure
    assert result.path[-1] is JobStatus.PENDING  # back to the scheduler, resumed elsewhere


# -- pods that cannot start --------------------------------------------------------------------


def _stuck(cluster: Cluster, pod: str, reason: str, *, scheduled_ago_s: float) -> None:
    scheduled = cluster.condition("PodScheduled", "True", "Scheduled", ago_s=scheduled_ago_s)
    waiting = {"waiting": {"reason": reason, "message": f'Back-off: "{reason}" for trainer:nope'}}
    cluster.set_pod_status(
        pod,
        {
            "phase": "Pending",
            "conditions": [scheduled],
            "containerStatuses": [cluster._container_status(waiting)],
        },
    )


@pytest.mark.parametrize(
    "reason", ["ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError"]
)
def test_pod_that_cannot_start_times_out_and_its_job_is_deleted(
    cluster: Cluster, make_request: RequestFactory, reason: str
) -> None:
    launcher = cluster.launcher(start_timeout_s=300)
    handle = launcher.launch(make_request(nodes=2))
    pod, other = cluster.start_pods(handle)
    cluster.set_pod_status(other, cluster.running())

    _stuck(cluster, pod, reason, scheduled_ago_s=60)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PENDING
    assert observation.message is not None and reason in observation.message
    assert exists(cluster.batch.read_namespaced_job, job_of(handle))

    _stuck(cluster, pod, reason, scheduled_ago_s=301)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.FAILED
    assert observation.message is not None
    assert reason in observation.message and pod in observation.message
    assert "trainer:nope" in observation.message
    # Given up: the Job goes, with its pods, and the GPU nodes they hold are free again.
    assert not exists(cluster.batch.read_namespaced_job, job_of(handle))
    (delete_job,) = [r for r in cluster.requests("DELETE") if "/jobs/" in r.url.path]
    assert delete_job.data["propagationPolicy"] == "Foreground"


def test_a_given_up_attempt_reads_the_same_while_its_job_is_deleted(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """A reconcile pass that dies after status() must close the attempt the same way next time,
    not as "cancelled by someone"."""
    launcher = cluster.launcher(start_timeout_s=300)
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    # Foreground deletion keeps the Job, marked, until its pods are gone.
    cluster.batch.patch_namespaced_job(
        job_of(handle), NS, {"metadata": {"finalizers": ["foregroundDeletion"]}}
    )
    _stuck(cluster, pod, "ImagePullBackOff", scheduled_ago_s=301)
    first = launcher.status(handle)
    assert exists(cluster.batch.read_namespaced_job, job_of(handle))
    again = launcher.status(handle)
    assert first.state is again.state is ObservedState.FAILED
    assert again.message == first.message


def test_unschedulable_attempt_given_up_frees_its_job(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher(unschedulable_timeout_s=600)
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    scheduled = cluster.condition(
        "PodScheduled", "False", "Unschedulable", ago_s=601, message="0/3 nodes are available"
    )
    cluster.set_pod_status(pod, {"phase": "Pending", "conditions": [scheduled]})
    assert launcher.status(handle).state is ObservedState.NO_CAPACITY
    assert not exists(cluster.batch.read_namespaced_job, job_of(handle))


BACKOFF = (
    "pod didn't trigger scale-up: 1 in backoff after failed scale-up, "
    "2 node(s) didn't match Pod's node affinity/selector"
)


def _unschedulable(cluster: Cluster, pod: str, *, ago_s: float) -> None:
    scheduled = cluster.condition(
        "PodScheduled", "False", "Unschedulable", ago_s=ago_s, message="0/3 nodes are available"
    )
    cluster.set_pod_status(pod, {"phase": "Pending", "conditions": [scheduled]})


def test_autoscaler_refusing_a_node_is_no_capacity_before_the_timeout(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """A spot stockout backs the autoscaler's node group off; it says so on the pod within its
    scan interval, and the attempt ends then instead of pending for the whole timeout."""
    launcher = cluster.launcher(unschedulable_timeout_s=600)
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    _unschedulable(cluster, pod, ago_s=60)
    cluster.pod_event(pod, "TriggeredScaleUp", "pod triggered scale-up: [spot-a100 0->1]", ago_s=50)
    assert launcher.status(handle).state is ObservedState.PENDING  # a node is on its way

    cluster.pod_event(pod, "FailedScaleUp", "Node scale up in zones us-east-1a failed", ago_s=20)
    cluster.pod_event(pod, "NotTriggerScaleUp", BACKOFF, ago_s=10)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.NO_CAPACITY
    assert (
        observation.message is not None
        and "in backoff after failed scale-up" in observation.message
    )
    assert not exists(cluster.batch.read_namespaced_job, job_of(handle))  # its nodes freed


@pytest.mark.parametrize(
    "case",
    ["before_unschedulable", "other_pod", "other_component", "scale_up_after", "turned_off"],
)
def test_only_the_autoscalers_latest_refusal_for_this_pod_ends_it(
    cluster: Cluster, make_request: RequestFactory, case: str
) -> None:
    launcher = cluster.launcher(
        unschedulable_timeout_s=600, autoscaler_verdict=case != "turned_off"
    )
    handle = launcher.launch(make_request(nodes=2))
    pod, other = cluster.start_pods(handle)
    _unschedulable(cluster, pod, ago_s=60)
    if case == "before_unschedulable":  # about an earlier wait of the pod, since answered
        cluster.pod_event(pod, "NotTriggerScaleUp", BACKOFF, ago_s=120)
    elif case == "other_pod":
        cluster.pod_event(other, "NotTriggerScaleUp", BACKOFF, ago_s=10)
    elif case == "other_component":
        cluster.pod_event(pod, "NotTriggerScaleUp", BACKOFF, ago_s=10, component="kube-scheduler")
    elif case == "scale_up_after":
        cluster.pod_event(pod, "NotTriggerScaleUp", BACKOFF, ago_s=30)
        cluster.pod_event(pod, "TriggeredScaleUp", "pod triggered scale-up", ago_s=10)
    else:
        cluster.pod_event(pod, "NotTriggerScaleUp", BACKOFF, ago_s=10)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.PENDING, observation.message
    assert exists(cluster.batch.read_namespaced_job, job_of(handle))


def test_a_gang_is_no_capacity_when_the_autoscaler_refuses_a_node_for_any_of_its_pods(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    launcher = cluster.launcher(unschedulable_timeout_s=600)
    handle = launcher.launch(make_request(nodes=2))
    first, second = cluster.start_pods(handle)
    _unschedulable(cluster, first, ago_s=60)
    _unschedulable(cluster, second, ago_s=50)
    # Room for one more node in the group: a node for the first pod, none for the second.
    cluster.pod_event(first, "TriggeredScaleUp", "pod triggered scale-up: [spot 3->4]", ago_s=40)
    assert launcher.status(handle).state is ObservedState.PENDING
    cluster.pod_event(second, "NotTriggerScaleUp", "max node group size reached", ago_s=30)
    observation = launcher.status(handle)
    assert observation.state is ObservedState.NO_CAPACITY
    assert observation.message is not None and "max node group size" in observation.message


def test_without_leave_to_read_events_the_timeout_decides(
    cluster: Cluster, make_request: RequestFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator's own Role may lack `events: list`: status still answers (a cancel reads it)."""
    launcher = cluster.launcher(unschedulable_timeout_s=600)
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    _unschedulable(cluster, pod, ago_s=60)
    cluster.pod_event(pod, "NotTriggerScaleUp", BACKOFF, ago_s=10)
    cluster.emulator["list", kmock.resource("", "v1", "events")] << 403
    assert launcher.status(handle).state is ObservedState.PENDING
    assert launcher.status(handle).state is ObservedState.PENDING
    assert sum("cannot list events" in r.message for r in caplog.records) == 1


def test_a_scale_up_started_in_the_same_second_as_a_refusal_is_waited_for() -> None:
    since = datetime(2026, 1, 1, tzinfo=UTC)

    def word(reason: str, seconds: int) -> client.CoreV1Event:
        return client.CoreV1Event(
            involved_object=client.V1ObjectReference(name="p"),
            metadata=client.V1ObjectMeta(name=f"p.{reason}"),
            reason=reason,
            message=reason,
            reporting_component="cluster-autoscaler",
            event_time=since + timedelta(seconds=seconds),
        )

    refused, started = word("NotTriggerScaleUp", 5), word("TriggeredScaleUp", 5)
    assert scale_up_refused([refused, started], since=since) is None
    assert scale_up_refused([started, word("FailedScaleUp", 6)], since=since) == "FailedScaleUp"
    assert scale_up_refused([refused], since=since + timedelta(seconds=6)) is None


def test_slow_image_pull_is_not_a_failure(cluster: Cluster, make_request: RequestFactory) -> None:
    """ContainerCreating covers a long pull of a big CUDA image: no timeout on it."""
    launcher = cluster.launcher(start_timeout_s=300)
    handle = launcher.launch(make_request())
    (pod,) = cluster.start_pods(handle)
    _stuck(cluster, pod, "ContainerCreating", scheduled_ago_s=3600)
    assert launcher.status(handle).state is ObservedState.PENDING
    assert exists(cluster.batch.read_namespaced_job, job_of(handle))


# -- what the launcher asks of the API server ----------------------------------------------------


def test_every_request_the_launcher_sends_is_one_the_static_read_found(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """The chart's RBAC is derived from a static read of the launcher (k8s_calls); this drives
    every path against the API and checks the read missed nothing the launcher really sends."""
    api = client.ApiClient(cluster.api.configuration)
    api.user_agent = "gpujobs-launcher-under-test"  # tells its requests from the test's own
    launcher = KubernetesLauncher(
        KubernetesLauncherConfig(namespace=NS, start_timeout_s=300), api_client=api
    )
    handle = launcher.launch(make_request(nodes=2))
    pod, other = cluster.start_pods(handle)
    cluster.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n-1"}})
    cluster.bind_pod(other, "n-1")
    not_ready = cluster.running()
    not_ready["conditions"] = [{"type": "Ready", "status": "False"}]
    cluster.set_pod_status(other, not_ready)
    cluster.emulator["get", kmock.subresource("log")] << b"step 1\n"
    assert list(launcher.logs(handle)) == ["step 1\n"]
    launcher.status(handle)  # reads the node of the not-ready pod
    _stuck(cluster, pod, "ImagePullBackOff", scheduled_ago_s=301)
    assert launcher.status(handle).state is ObservedState.FAILED  # patches, then deletes
    second = launcher.launch(make_request(attempt_id="att-2", nodes=2))
    waiting, _ = cluster.start_pods(second)
    _unschedulable(cluster, waiting, ago_s=10)
    launcher.status(second)  # reads the autoscaler's events on the unschedulable pod
    launcher.cancel(second)
    queued = KubernetesLauncher(
        KubernetesLauncherConfig(namespace=NS, kueue_queue="gpu"), api_client=api
    )
    launcher.status(queued.launch(make_request(attempt_id="att-3")))  # lists Kueue's Workloads
    launcher.delete_all_attempts(timeout_s=0)  # helm uninstall's hook: lists the Jobs

    static = launcher_calls(*WORKER_ENTRY_POINTS)
    sent = {
        call_of(r.url.path, r.method)
        for r in cluster.emulator
        if isinstance(r, rendering.Request)
        and r.headers.get("User-Agent") == "gpujobs-launcher-under-test"
    }
    assert sent <= static, sorted(sent - static)
    # And the read is not wildly larger than what one run exercises.
    assert static - sent == set(), sorted(static - sent)


def test_uninstall_deletes_every_attempt_and_nothing_else(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """The chart's pre-delete hook: every Job the launcher made goes, running or finished, with
    its Secret and Service; a Job of someone else's in the namespace stays."""
    launcher = cluster.launcher()
    first = launcher.launch(make_request(nodes=2))
    second = launcher.launch(make_request(attempt_id="att-2"))
    theirs = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "not-ours"},
              "spec": {"template": {"spec": {"containers": []}}}}  # fmt: skip
    cluster.batch.create_namespaced_job(NS, theirs)

    deleted = launcher.delete_all_attempts(timeout_s=0)

    assert sorted(deleted) == sorted([job_of(first), job_of(second)])
    for handle in (first, second):
        assert launcher.status(handle).state is ObservedState.LOST
        assert not exists(cluster.core.read_namespaced_secret, f"gpujobs-token-{job_of(handle)}")
    assert not exists(cluster.core.read_namespaced_service, job_of(first))
    assert exists(cluster.batch.read_namespaced_job, "not-ours")


def test_the_launcher_needs_no_cluster_credentials_until_it_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API process builds a launcher for logs at import: no kubeconfig must not crash it."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    launcher = KubernetesLauncher(KubernetesLauncherConfig(namespace=NS))
    with pytest.raises(ConfigException):
        launcher.status(f"{NS}/gj-x")

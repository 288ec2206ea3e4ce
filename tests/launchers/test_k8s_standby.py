"""Make-before-break (#25) on Kubernetes: a standby attempt beside its job's running attempt is
a Job, Secret and Service of its own; stopping, giving up or reading one touches nothing of the
other, though both carry the same job's labels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import kmock
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpujobs.runtime import ENV_RUN_CONFIG_JSON, RunConfig
from gpujobs.spec import CapacityType
from tests.launchers.conftest import NAMESPACE as NS
from tests.launchers.conftest import Cluster
from worker.launchers.base import LaunchRequest, ObservedState
from worker.launchers.kubernetes import KubernetesLauncher

RequestFactory = Callable[..., LaunchRequest]
JOB_ID = "job-7f3a"


@dataclass(frozen=True)
class Pair:
    """The job's running attempt (on demand) and the standby beside it (on spot)."""

    launcher: KubernetesLauncher
    running: LaunchRequest
    standby: LaunchRequest
    handles: dict[str, str]  # attempt id: handle

    def name(self, attempt_id: str) -> str:
        return self.handles[attempt_id].split("/")[1]


def launch_pair(cluster: Cluster, make_request: RequestFactory) -> Pair:
    running = make_request(
        job_id=JOB_ID, attempt_id="att-1", attempt_number=1, nodes=2,
        capacity_type=CapacityType.ON_DEMAND,
    )  # fmt: skip
    standby_config = running.run_config.model_copy(update={"standby": True})
    standby = make_request(
        job_id=JOB_ID, attempt_id="att-2", attempt_number=2, nodes=2,
        capacity_type=CapacityType.SPOT, run_config=standby_config,
    )  # fmt: skip
    launcher = cluster.launcher()  # unschedulable_timeout_s=600
    handles = {r.attempt_id: launcher.launch(r) for r in (running, standby)}
    return Pair(launcher, running, standby, handles)


def objects(cluster: Cluster, name: str) -> dict[str, bool]:
    """Which of the attempt's objects exist."""
    reads = {
        "job": (cluster.batch.read_namespaced_job, name),
        "service": (cluster.core.read_namespaced_service, name),
        "secret": (cluster.core.read_namespaced_secret, f"gpujobs-token-{name}"),
    }
    found = {}
    for kind, (read, object_name) in reads.items():
        try:
            read(object_name, NS)
        except ApiException as exc:
            assert exc.status == 404
            found[kind] = False
        else:
            found[kind] = True
    return found


def run_config_of(job: client.V1Job) -> RunConfig:
    (container,) = job.spec.template.spec.containers
    (value,) = [e.value for e in container.env if e.name == ENV_RUN_CONFIG_JSON]
    return RunConfig.model_validate_json(value)


def start(cluster: Cluster, handle: str) -> list[str]:
    pods = cluster.start_pods(handle)
    for pod in pods:
        cluster.set_pod_status(pod, cluster.running())
    return pods


def test_a_standby_is_a_job_secret_and_service_of_its_own(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    pair = launch_pair(cluster, make_request)

    names = {attempt: pair.name(attempt) for attempt in ("att-1", "att-2")}
    assert names["att-1"] != names["att-2"]
    jobs = {j.metadata.name: j for j in cluster.batch.list_namespaced_job(NS).items}
    assert set(jobs) == set(names.values())
    for request, other in ((pair.running, "att-2"), (pair.standby, "att-1")):
        name = names[request.attempt_id]
        job = jobs[name]
        labels = job.metadata.labels
        assert labels["gpujobs.dev/job-id"] == JOB_ID  # the same job...
        assert labels["gpujobs.dev/attempt-id"] == request.attempt_id  # ...its own attempt
        assert labels["gpujobs.dev/attempt-number"] == str(request.attempt_number)
        assert labels["gpujobs.dev/capacity-type"] == request.placement.capacity_type.value
        assert objects(cluster, name) == {"job": True, "service": True, "secret": True}
        # The rendezvous Service selects this attempt's pods only, never the other's.
        selector = cluster.core.read_namespaced_service(name, NS).spec.selector
        assert selector.items() <= job.spec.template.metadata.labels.items()
        assert not selector.items() <= jobs[names[other]].spec.template.metadata.labels.items()
        # The pods read their token from this attempt's Secret, which this attempt's Job owns.
        secret = cluster.core.read_namespaced_secret(f"gpujobs-token-{name}", NS)
        (owner,) = secret.metadata.owner_references
        assert (owner.name, owner.uid) == (name, job.metadata.uid)
        (container,) = job.spec.template.spec.containers
        refs = {e.value_from.secret_key_ref.name for e in container.env if e.value_from}
        assert refs == {f"gpujobs-token-{name}"}
        # The run config names the attempt, and says whether it is the standby.
        config = run_config_of(job)
        assert (config.job_id, config.attempt_id) == (JOB_ID, request.attempt_id)
        assert config.standby is request.run_config.standby
    assert run_config_of(jobs[names["att-2"]]).standby is True
    assert run_config_of(jobs[names["att-1"]]).standby is False


@pytest.mark.parametrize(
    ("stopped", "kept"),
    [
        ("att-1", "att-2"),  # the standby's go: the running attempt checkpoints and ends
        ("att-2", "att-1"),  # the standby is no longer wanted
    ],
)
def test_cancelling_one_attempt_leaves_the_other_and_its_objects(
    cluster: Cluster, make_request: RequestFactory, stopped: str, kept: str
) -> None:
    pair = launch_pair(cluster, make_request)
    pods = {attempt: start(cluster, handle) for attempt, handle in pair.handles.items()}
    for handle in pair.handles.values():
        assert pair.launcher.status(handle).state is ObservedState.RUNNING

    pair.launcher.cancel(pair.handles[stopped])

    assert objects(cluster, pair.name(stopped)) == {"job": False, "service": False, "secret": False}
    assert objects(cluster, pair.name(kept)) == {"job": True, "service": True, "secret": True}
    # Deleted by name, one object at a time: never a collection, never by a job-wide label.
    deletes = cluster.requests("DELETE")
    assert len(deletes) == 3
    for delete in deletes:
        assert delete.url.path.rsplit("/", 1)[1].endswith(pair.name(stopped))
        assert not delete.params.get("labelSelector")
    assert pair.launcher.status(pair.handles[stopped]).state is ObservedState.LOST
    assert pair.launcher.status(pair.handles[kept]).state is ObservedState.RUNNING
    # Its log is its own rank 0's.
    cluster.emulator["get", kmock.subresource("log")] << b"step 7\n"
    assert list(pair.launcher.logs(pair.handles[kept])) == ["step 7\n"]
    (log_request,) = [r for r in cluster.requests("GET") if r.url.path.endswith("/log")]
    assert log_request.url.path == f"/api/v1/namespaces/{NS}/pods/{pods[kept][0]}/log"


def test_a_standby_given_up_for_no_spot_leaves_the_running_attempt(
    cluster: Cluster, make_request: RequestFactory
) -> None:
    """The usual end of a standby that never gets its spot node: the launcher gives it up and
    deletes what it made; the running attempt's Job, pods and Secret stay."""
    pair = launch_pair(cluster, make_request)
    start(cluster, pair.handles["att-1"])
    unschedulable = cluster.condition(
        "PodScheduled", "False", "Unschedulable", ago_s=601, message="0/3 nodes are available"
    )
    for pod in cluster.start_pods(pair.handles["att-2"]):
        cluster.set_pod_status(pod, {"phase": "Pending", "conditions": [unschedulable]})

    assert pair.launcher.status(pair.handles["att-2"]).state is ObservedState.NO_CAPACITY

    assert objects(cluster, pair.name("att-2")) == {"job": False, "service": False, "secret": False}
    assert objects(cluster, pair.name("att-1")) == {"job": True, "service": True, "secret": True}
    assert pair.launcher.status(pair.handles["att-1"]).state is ObservedState.RUNNING

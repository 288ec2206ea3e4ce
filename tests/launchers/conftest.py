"""A Kubernetes API for launcher tests: kmock's emulator served over HTTP from its own thread.

The official client is synchronous, so the emulator's event loop runs in a background thread and
tests talk to it exactly as the launcher does: over HTTP. Nothing plays the Job controller or
the kubelet; `Cluster` helpers do their part (create pods from a Job's template, write pod
status) through the same API, so watches see those changes too.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp.web
import kmock
import pytest
from kmock._internal import rendering
from kubernetes import client
from kubernetes.client.rest import ApiException

from api.placement import Placement
from gpujobs.runtime import RunConfig
from gpujobs.spec import CapacityType, TrainerSpec
from worker.launchers.base import LaunchRequest
from worker.launchers.kubernetes import KubernetesLauncher, KubernetesLauncherConfig
from worker.launchers.kubernetes.manifests import COMPLETION_INDEX_ANNOTATION

NAMESPACE = "gpujobs-test"
_resource_versions = itertools.count(1)


class ClusterEmulator(kmock.KubernetesEmulator):
    """kmock plus the two bits of API-server behaviour the launcher relies on."""

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kubernetes==36.0.3 sends `watch=True`; kmock only recognises `watch=true` (INFRA.md).
        if raw_request.query.get("watch") == "True":
            rel_url = raw_request.rel_url.update_query(watch="true")
            raw_request = raw_request.clone(rel_url=rel_url)
        return await super().__call__(raw_request)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        # Server-side defaulting: a uid for owner references, a creation time for timeouts,
        # and a resourceVersion on every write so watches can resume.
        if request.resource is not None and isinstance(request.data, dict):
            metadata = request.data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                metadata.setdefault("uid", str(uuid.uuid4()))
                metadata.setdefault("creationTimestamp", _timestamp(datetime.now(UTC)))
            if request.action in (kmock.action.CREATE, kmock.action.UPDATE):
                metadata["resourceVersion"] = str(next(_resource_versions))
        return await super()._handle(request)


def _timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _timestamp(datetime.now(UTC))


@dataclass
class Cluster:
    emulator: ClusterEmulator
    api: client.ApiClient
    core: client.CoreV1Api = field(init=False)
    batch: client.BatchV1Api = field(init=False)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)

    def launcher(
        self, *, clock: Callable[[], datetime] | None = None, **overrides: Any
    ) -> KubernetesLauncher:
        values: dict[str, Any] = {"namespace": NAMESPACE, "unschedulable_timeout_s": 600.0}
        values.update(overrides)
        launcher_config = KubernetesLauncherConfig(**values)
        if clock is None:
            return KubernetesLauncher(launcher_config, api_client=self.api)
        return KubernetesLauncher(launcher_config, api_client=self.api, clock=clock)

    # -- What the Job controller and the kubelet would do ----------------------------------

    def start_pods(self, handle: str) -> list[str]:
        """Create the Job's pods from its template, one per completion index."""
        namespace, name = handle.split("/")
        job = self.batch.read_namespaced_job(name, namespace)
        template = self.api.sanitize_for_serialization(job.spec.template)
        names = []
        for index in range(job.spec.completions):
            pod_name = f"{name}-{index}-{uuid.uuid4().hex[:5]}"
            labels = {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": name}
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": {COMPLETION_INDEX_ANNOTATION: str(index)},
                },
                "spec": template["spec"],
                "status": {"phase": "Pending"},
            }
            self.core.create_namespaced_pod(namespace, body)
            names.append(pod_name)
        return names

    def set_pod_status(self, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(name, NAMESPACE, {"status": status})

    def bind_pod(self, name: str, node: str) -> None:
        """What the scheduler does: put the pod on a node."""
        self.core.patch_namespaced_pod(name, NAMESPACE, {"spec": {"nodeName": node}})

    def set_job_conditions(self, handle: str, *conditions: dict[str, Any]) -> None:
        name = handle.split("/")[1]
        self.batch.patch_namespaced_job_status(
            name, NAMESPACE, {"status": {"conditions": conditions}}
        )

    def kueue_workload(self, handle: str, *conditions: dict[str, Any]) -> None:
        """Kueue's Workload of the Job (labelled with its uid, as Kueue labels it), with these
        conditions; written anew on each call."""
        namespace, name = handle.split("/")
        job = self.batch.read_namespaced_job(name, namespace)
        custom = client.CustomObjectsApi(self.api)
        workload = f"job-{name}-{job.metadata.uid[:5]}"
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload,
                "namespace": namespace,
                "labels": {"kueue.x-k8s.io/job-uid": job.metadata.uid},
            },
            "spec": {"queueName": job.metadata.labels["kueue.x-k8s.io/queue-name"]},
            "status": {"conditions": list(conditions)},
        }
        try:
            custom.delete_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", namespace, "workloads", workload
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        custom.create_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, "workloads", body
        )

    def suspend(self, handle: str, suspended: bool) -> None:
        """What Kueue does to a Job: unsuspend it to admit it, suspend it to evict it."""
        namespace, name = handle.split("/")
        self.batch.patch_namespaced_job(name, namespace, {"spec": {"suspend": suspended}})

    def fail_by_policy(
        self,
        handle: str,
        pod: str,
        *,
        exit_code: int,
        disrupted: bool,
        condition: str = "Failed",
    ) -> None:
        """What the Job controller writes when pod `pod` ended with `exit_code` (and the
        DisruptionTarget condition, if `disrupted`): Failed, naming the first rule of the Job's
        own podFailurePolicy that matches the pod, as Kubernetes evaluates them (in order).
        `condition="FailureTarget"`: what it writes first, while it stops the other pods."""
        namespace, name = handle.split("/")
        rules = self.batch.read_namespaced_job(name, namespace).spec.pod_failure_policy.rules
        for index, rule in enumerate(rules):
            codes = rule.on_exit_codes
            on_conditions = {c.type for c in rule.on_pod_conditions or []}
            if disrupted and "DisruptionTarget" in on_conditions:
                what = f"Pod {namespace}/{pod} has condition DisruptionTarget"
            elif codes is not None and (exit_code in codes.values) == (codes.operator == "In"):
                what = f"Container trainer for pod {namespace}/{pod} failed with exit code "
                what += str(exit_code)
            else:
                continue
            message = f"{what} matching FailJob rule at index {index}"
            failed = self.condition(condition, "True", "PodFailurePolicy", message=message)
            break
        else:
            message = "Job has reached the specified backoff limit"
            failed = self.condition(condition, "True", "BackoffLimitExceeded", message=message)
        self.set_job_conditions(handle, failed)

    def pod_event(
        self,
        pod: str,
        reason: str,
        message: str,
        *,
        ago_s: float = 0,
        component: str = "cluster-autoscaler",
    ) -> None:
        """An event on a pod, as the autoscaler's (or another component's) recorder writes it."""
        moment = _timestamp(datetime.now(UTC) - timedelta(seconds=ago_s))
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod}.{uuid.uuid4().hex[:12]}", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": NAMESPACE},
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "firstTimestamp": moment,
            "lastTimestamp": moment,
            "count": 1,
            "type": "Normal",
        }
        self.core.create_namespaced_event(NAMESPACE, body)

    def requests(self, method: str) -> list[rendering.Request]:
        """What the launcher sent, as the emulator recorded it."""
        return [r for r in self.emulator if isinstance(r, rendering.Request) and r.method == method]

    # -- Pod status as the kubelet reports it ----------------------------------------------

    @staticmethod
    def running() -> dict[str, Any]:
        return {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [Cluster._container_status({"running": {"startedAt": _now()}})],
            "hostIP": "10.0.0.1",
        }

    @staticmethod
    def terminated(
        exit_code: int, *, reason: str = "Error", ago_s: float = 0, **extra: Any
    ) -> dict[str, Any]:
        finished = _timestamp(datetime.now(UTC) - timedelta(seconds=ago_s))
        state = {"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": finished}}
        phase = "Succeeded" if exit_code == 0 else "Failed"
        return {"phase": phase, "containerStatuses": [Cluster._container_status(state)], **extra}

    @staticmethod
    def condition(
        type_: str, status: str, reason: str, *, ago_s: float = 0, **extra: Any
    ) -> dict[str, Any]:
        moment = datetime.now(UTC) - timedelta(seconds=ago_s)
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "lastTransitionTime": _timestamp(moment),
            **extra,
        }

    @staticmethod
    def _container_status(state: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": "trainer",
            "image": "trainer:test",
            "imageID": "",
            "ready": "running" in state,
            "restartCount": 0,
            "state": state,
        }


@pytest.fixture
def make_request() -> Callable[..., LaunchRequest]:
    return _make_request


def _make_request(**overrides: Any) -> LaunchRequest:
    """A request; overrides named like a Placement field (nodes, capacity_type...) go there."""
    where: dict[str, Any] = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instance_type": "p4d.24xlarge",
        "gpu_model": "A100",
        "gpu_count": 8,
        "nodes": 1,
        "capacity_type": CapacityType.SPOT,
        "price_per_hour": 10.0,
        "on_demand_price_per_hour": 32.0,
    }
    where.update({k: overrides.pop(k) for k in list(overrides) if k in where})
    values: dict[str, Any] = {
        "job_id": "job-7f3a",
        "attempt_id": "att-7f3a-1",
        "attempt_number": 1,
        "job_name": "llm-finetune",
        "team": "research",
        "placement": Placement(**where),
        "gpus_per_node": 8,
        "run_config": RunConfig(
            trainer=TrainerSpec(steps=100),
            checkpoint_uri="s3://ckpt/job-7f3a",
            api_url="http://gpujobs-api:8000",
        ),
        "job_token": "tok-secret-123",
    }
    values.update(overrides)
    return LaunchRequest(**values)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        holder["stop"] = asyncio.Event()
        async with ClusterEmulator() as emulator, kmock.Server(emulator) as server:
            emulator.resources.load_bundled()
            holder["emulator"], holder["url"] = emulator, str(server.url).rstrip("/")
            started.set()
            await holder["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(10), "the emulator did not start"
    configuration = client.Configuration(host=holder["url"])
    api = client.ApiClient(configuration)
    try:
        yield Cluster(emulator=holder["emulator"], api=api)
    finally:
        api.close()
        loop.call_soon_threadsafe(holder["stop"].set)
        thread.join(10)
        loop.close()

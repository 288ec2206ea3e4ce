"""The local cluster of real upstream components (scripts/cluster/), as tests use it.

`make cluster` (or the first test that asks) starts it; tests get an admin client, a namespace
of their own under Pod Security "restricted", the trainer image in the node's containerd, and
relays that let pods reach the test's S3 server and API on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from devstack.s3server import S3Server
from devstack.stack import ROOT
from gpujobs.spec import CapacityType
from worker.launchers.kubernetes import KubernetesLauncher, KubernetesLauncherConfig
from worker.launchers.kubernetes.config import TrainerResources, TrainerS3Keys, custom_profile

SCRIPTS = ROOT / "scripts" / "cluster"
TRAINER_IMAGE = os.environ.get("TRAINER_IMAGE", "gpujobs-trainer:cpu")
NODE = "gpujobs-node"
# Every capacity type lands on the one node: a custom profile whose label the node carries.
CAPACITY_LABEL = "gpujobs.dev/local-capacity"
CAPACITY_VALUE = "any"
# GPUs as test clusters fake them: an extended resource on the node's capacity.
FAKE_GPUS = 4


def cluster_setting(name: str) -> str:
    """A value of scripts/cluster/env.sh (paths, addresses), as the scripts see it."""
    out = subprocess.run(
        ["bash", "-c", f"source {SCRIPTS}/env.sh && echo ${name}"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


def start_cluster() -> Path:
    """Start (or find running) the local cluster; its admin kubeconfig."""
    done = subprocess.run(["bash", str(SCRIPTS / "up.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"the local cluster did not start:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def import_images(*images: str) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPTS / "images.sh"), *images], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise AssertionError(f"importing {images} failed:\n{done.stderr[-4000:]}")


def build_trainer_image() -> None:
    """The trainer image from docker/, when Docker has none (`make test` builds it first, from
    this checkout: `make cluster-images`)."""
    present = subprocess.run(["docker", "image", "inspect", TRAINER_IMAGE], capture_output=True)
    if present.returncode == 0:
        return
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "docker-images.sh")],
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "IMAGE_SIZES_JSON": "/dev/null"},
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"building the images failed:\n{done.stderr[-4000:]}")


@dataclass
class RealCluster:
    kubeconfig: Path
    node_ip: str
    api: client.ApiClient = field(init=False)
    # The trainers' S3 keys, copied into each attempt's Secret (set with the pods' S3 relay).
    s3_keys: TrainerS3Keys | None = None

    def __post_init__(self) -> None:
        configuration = client.Configuration()
        config.load_kube_config(str(self.kubeconfig), client_configuration=configuration)
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> str:
        done = subprocess.run(
            [cluster_setting("BIN_DIR") + "/kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, input=input,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done.stdout

    def prepare_node(self) -> None:
        self.kubectl("label", "node", NODE, f"{CAPACITY_LABEL}={CAPACITY_VALUE}", "--overwrite")
        patch = {"status": {"capacity": {"nvidia.com/gpu": str(FAKE_GPUS)}}}
        self.core.patch_node_status(NODE, patch)

    def namespace(self, *, restricted: bool = True) -> str:
        name = f"gpujobs-k8s-{uuid.uuid4().hex[:8]}"
        labels = {}
        if restricted:
            for mode in ("enforce", "warn", "audit"):
                labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        body = {"metadata": {"name": name, "labels": labels}}
        self.core.create_namespace(body)
        return name

    def delete_namespace(self, name: str) -> None:
        try:
            self.core.delete_namespace(name, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def pods(self, namespace: str, job: str) -> list[client.V1Pod]:
        selector = f"batch.kubernetes.io/job-name={job}"
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    def evict(self, namespace: str, pod: str) -> None:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
        self.core.create_namespaced_pod_eviction(pod, namespace, body)

    def wait(self, predicate: Callable[[], Any], *, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

    def launcher(self, namespace: str, **overrides: Any) -> KubernetesLauncher:
        values: dict[str, Any] = {
            "namespace": namespace,
            "default_image": TRAINER_IMAGE,
            "image_pull_policy": "IfNotPresent",
            "capacity_profile": custom_profile(
                CAPACITY_LABEL, {kind: CAPACITY_VALUE for kind in CapacityType}
            ),
            "instance_type_label": "",
            "tolerations": (),
            # Two cores: small requests, so a gang and a standby fit beside each other.
            "resources": TrainerResources(
                cpu_per_gpu=0.1, memory_gib_per_gpu=1.0, shm_size_gib=0.25
            ),
            "termination_grace_s": 30,
            "start_timeout_s": 120.0,
            "unschedulable_timeout_s": 600.0,
            "trainer_s3_keys": self.s3_keys,
        }
        values.update(overrides)
        return KubernetesLauncher(KubernetesLauncherConfig(**values), api_client=self.api)


def events_of(cluster: RealCluster, namespace: str, name: str) -> list[str]:
    items = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    ).items
    return [f"{e.reason}: {e.message}" for e in items]


def pod_json(cluster: RealCluster, namespace: str, pod: str) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", "pod", "-n", namespace, pod, "-o", "json")))


def all_pods_gone(cluster: RealCluster, namespace: str) -> Iterator[str]:
    yield from (p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items)


def service_env(
    cluster: RealCluster, *, namespace: str, s3: S3Server, pod_s3_url: str, public_url: str
) -> dict[str, str]:
    """The settings of a gpujobs service (devstack.Stack) that launches on this cluster: every
    capacity type is the node's one label value (a single node holds them all), small requests
    (two cores), and pods reach this machine's API and S3 through relays on the node's address."""
    values = {"spot": CAPACITY_VALUE, "on_demand": CAPACITY_VALUE, "reserved": CAPACITY_VALUE}
    return {
        "GPUJOBS_LAUNCHER": "kubernetes",
        "KUBECONFIG": str(cluster.kubeconfig),
        "GPUJOBS_K8S_NAMESPACE": namespace,
        "GPUJOBS_TRAINER_IMAGE": TRAINER_IMAGE,
        "GPUJOBS_K8S_CAPACITY_PROFILE": "custom",
        "GPUJOBS_K8S_CAPACITY_TYPE_LABEL": CAPACITY_LABEL,
        "GPUJOBS_K8S_CAPACITY_TYPE_VALUES": json.dumps(values),
        "GPUJOBS_K8S_INSTANCE_TYPE_LABEL": "",
        "GPUJOBS_K8S_CPU_PER_GPU": "0.1",
        "GPUJOBS_K8S_MEMORY_GIB_PER_GPU": "1",
        "GPUJOBS_K8S_SHM_SIZE_GIB": "0.25",
        "GPUJOBS_K8S_TERMINATION_GRACE_S": "30",
        "GPUJOBS_K8S_TRAINER_S3_ACCESS_KEY_ID": s3.access_key,
        "GPUJOBS_K8S_TRAINER_S3_SECRET_ACCESS_KEY": s3.secret_key,
        "GPUJOBS_PUBLIC_URL": public_url,
        "GPUJOBS_S3_ENDPOINT_URL": pod_s3_url,
    }

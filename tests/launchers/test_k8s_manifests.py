"""Every object the Kubernetes launcher creates, checked against the real API schemas."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client

from api.settings import Settings
from gpujobs.runtime import ENV_JOB_TOKEN, ENV_RUN_CONFIG_JSON, RunConfig
from gpujobs.spec import CapacityType
from worker.launchers.base import LaunchRequest
from worker.launchers.kubernetes import KubernetesLauncherConfig, Toleration
from worker.launchers.kubernetes.manifests import (
    AttemptManifests,
    build_manifests,
    job_name,
    label_value,
)

# The version the launcher is written against, and the newest the validator knows.
VERSIONS = sorted({"1.33.0", kubernetes_validate.utils.latest_version()})
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

ApiDict = dict[str, Any]
RequestFactory = Callable[..., LaunchRequest]


def render(request: LaunchRequest, **config: Any) -> tuple[AttemptManifests, dict[str, ApiDict]]:
    manifests = build_manifests(request, KubernetesLauncherConfig(namespace="ml", **config))
    api = client.ApiClient()
    objects = {
        "job": api.sanitize_for_serialization(manifests.job),
        "secret": api.sanitize_for_serialization(manifests.secret),
    }
    if manifests.service is not None:
        objects["service"] = api.sanitize_for_serialization(manifests.service)
    return manifests, objects


def assert_valid(obj: ApiDict) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)
    for value in obj["metadata"].get("labels", {}).values():
        assert len(value) <= 63 and LABEL_VALUE.match(value), value


def pod_spec(job: ApiDict) -> ApiDict:
    return job["spec"]["template"]["spec"]


def env_of(job: ApiDict) -> dict[str, ApiDict]:
    return {e["name"]: e for e in pod_spec(job)["containers"][0]["env"]}


@pytest.mark.parametrize("nodes", [1, 4])
def test_every_manifest_is_valid_for_the_api(make_request: RequestFactory, nodes: int) -> None:
    _, objects = render(
        make_request(nodes=nodes),
        kueue_queue="gpu-queue",
        service_account="trainer",
        s3_credentials_secret="s3-creds",
        spot_tolerations=(
            Toleration(key="cloud.google.com/gke-spot", operator="Equal", value="true"),
        ),
        priority_class_name="batch-low",
        image_pull_policy="IfNotPresent",
    )
    assert set(objects) == ({"job", "secret", "service"} if nodes > 1 else {"job", "secret"})
    for obj in objects.values():
        assert_valid(obj)


def test_single_node_job_shape(make_request: RequestFactory) -> None:
    request = make_request(nodes=1, gpus_per_node=8)
    _, objects = render(request)
    job = objects["job"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 1
    assert spec["backoffLimit"] == 0
    assert "suspend" not in spec
    pod = pod_spec(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["terminationGracePeriodSeconds"] == 120
    assert "subdomain" not in pod
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
        "karpenter.sh/capacity-type": "spot",
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert container["command"] == ["torchrun"]
    assert container["args"] == [
        "--nnodes=1",
        "--nproc_per_node=8",
        "--node_rank=$(JOB_COMPLETION_INDEX)",
        "--master_addr=127.0.0.1",
        "--master_port=29500",
        "-m",
        "trainer",
    ]


def test_multi_node_job_rendezvous_through_headless_service(make_request: RequestFactory) -> None:
    _, objects = render(make_request(nodes=4, gpus_per_node=8))
    job, service = objects["job"], objects["service"]
    name = job["metadata"]["name"]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    pod = pod_spec(job)
    assert pod["subdomain"] == service["metadata"]["name"] == name
    assert f"--master_addr={name}-0.{name}" in pod["containers"][0]["args"]
    assert "--nnodes=4" in pod["containers"][0]["args"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["port"] == 29500
    # The Service selects exactly this attempt's pods.
    template_labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items()


def test_pod_failure_policy_tells_preemption_from_failure(make_request: RequestFactory) -> None:
    _, objects = render(make_request())
    rules = objects["job"]["spec"]["podFailurePolicy"]["rules"]
    assert rules == [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [75, 76]},
        },
        {
            "action": "FailJob",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        },
    ]


def test_labels_and_annotations_identify_the_attempt(make_request: RequestFactory) -> None:
    request = make_request(team="Research Team/ÉU", job_id="j" * 64)
    manifests, objects = render(request, extra_labels={"cost-center": "ml"})
    name = manifests.job.metadata.name
    for obj in objects.values():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "gpujobs"
        assert labels["gpujobs.dev/attempt-id"] == "att-7f3a-1"
        assert labels["gpujobs.dev/attempt-name"] == name
        assert labels["gpujobs.dev/capacity-type"] == "spot"
        assert labels["cost-center"] == "ml"
        assert_valid(obj)
    job = objects["job"]
    assert job["spec"]["template"]["metadata"]["labels"]["gpujobs.dev/attempt-id"] == "att-7f3a-1"
    # Values that are not valid label values survive intact in annotations.
    assert job["metadata"]["annotations"]["gpujobs.dev/team"] == "Research Team/ÉU"
    assert job["metadata"]["annotations"]["gpujobs.dev/job-id"] == "j" * 64


def test_run_config_token_and_credentials_reach_the_trainer(make_request: RequestFactory) -> None:
    request = make_request(env={"WANDB_MODE": "offline", "GPUJOBS_JOB_TOKEN": "spoofed"})
    manifests, objects = render(
        request, s3_credentials_secret="s3-creds", api_url="http://api.gpujobs.svc:8000"
    )
    env = env_of(objects["job"])
    config = RunConfig.model_validate_json(env[ENV_RUN_CONFIG_JSON]["value"])
    assert config.attempt_id == "att-7f3a-1"
    assert config.job_id == "job-7f3a"
    assert config.checkpoint_uri == "s3://ckpt/job-7f3a"
    assert config.api_url == "http://api.gpujobs.svc:8000"
    assert config.trainer == request.run_config.trainer
    assert env["WANDB_MODE"]["value"] == "offline"
    # The token is never inline: it comes from the attempt's Secret.
    assert env[ENV_JOB_TOKEN] == {
        "name": ENV_JOB_TOKEN,
        "valueFrom": {"secretKeyRef": {"name": manifests.secret.metadata.name, "key": "token"}},
    }
    assert "tok-secret-123" not in json.dumps(objects["job"])
    secret = objects["secret"]
    assert base64.b64decode(secret["data"]["token"]).decode() == "tok-secret-123"
    assert secret["metadata"]["name"] == f"gpujobs-token-{manifests.job.metadata.name}"
    container = pod_spec(objects["job"])["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]


def test_api_url_of_the_run_config_is_kept_without_override(make_request: RequestFactory) -> None:
    _, objects = render(make_request())
    config = json.loads(env_of(objects["job"])[ENV_RUN_CONFIG_JSON]["value"])
    assert config["api_url"] == "http://gpujobs-api:8000"


@pytest.mark.parametrize(
    ("capacity", "expected"),
    [
        (CapacityType.SPOT, "spot"),
        (CapacityType.ON_DEMAND, "on-demand"),
        (CapacityType.RESERVED, "reserved"),
    ],
)
def test_capacity_type_selects_nodes(
    make_request: RequestFactory, capacity: CapacityType, expected: str
) -> None:
    _, objects = render(make_request(capacity_type=capacity))
    assert pod_spec(objects["job"])["nodeSelector"]["karpenter.sh/capacity-type"] == expected


def test_capacity_labels_and_spot_taints_are_configurable(make_request: RequestFactory) -> None:
    config: dict[str, Any] = {
        "capacity_type_label": "cloud.google.com/gke-provisioning",
        "capacity_type_values": {CapacityType.SPOT: "spot", CapacityType.RESERVED: None},
        "spot_tolerations": (
            Toleration(key="cloud.google.com/gke-spot", operator="Equal", value="true"),
        ),
        "zone_label": "topology.kubernetes.io/zone",
    }
    _, spot = render(make_request(capacity_type=CapacityType.SPOT), **config)
    _, reserved = render(make_request(capacity_type=CapacityType.RESERVED), **config)
    spot_pod, reserved_pod = pod_spec(spot["job"]), pod_spec(reserved["job"])
    assert spot_pod["nodeSelector"]["cloud.google.com/gke-provisioning"] == "spot"
    assert spot_pod["nodeSelector"]["topology.kubernetes.io/zone"] == "us-east-1a"
    # Mapped to None: no capacity constraint at all.
    assert "cloud.google.com/gke-provisioning" not in reserved_pod["nodeSelector"]
    spot_keys = {t["key"] for t in spot_pod["tolerations"]}
    reserved_keys = {t["key"] for t in reserved_pod["tolerations"]}
    assert spot_keys == {"nvidia.com/gpu", "cloud.google.com/gke-spot"}
    assert reserved_keys == {"nvidia.com/gpu"}


def test_kueue_queue_label_and_suspended_start(make_request: RequestFactory) -> None:
    _, objects = render(make_request(), kueue_queue="team-a")
    job = objects["job"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True


@pytest.mark.parametrize(
    "attempt_id",
    ["att-1", "ATT_1", "0f8e9c2a-5b7d-4e1f-9a3c-2d6b8e0f1a47", "x" * 64, "--", "a.b/c d"],
)
def test_job_names_are_deterministic_dns_labels(attempt_id: str) -> None:
    name = job_name(attempt_id)
    assert name == job_name(attempt_id)
    assert DNS_LABEL.match(name) and len(name) <= 52
    # Room for the Indexed pod hostname `<job>-<index>`.
    assert len(f"{name}-1023") <= 63


def test_job_names_do_not_collide_after_sanitizing() -> None:
    names = {job_name(a) for a in ["abc", "ABC", "a_bc", "a-bc", "a" * 60, "a" * 61]}
    assert len(names) == 6


def test_label_values_are_valid_or_untouched() -> None:
    assert label_value("research") == "research"
    for raw in ["Research Team/ÉU", "x" * 64, "-lead", "ümlaut"]:
        value = label_value(raw)
        assert len(value) <= 63 and LABEL_VALUE.match(value)
    assert label_value("x" * 64) != label_value("x" * 65)


def test_config_from_settings_reads_k8s_settings() -> None:
    settings = Settings(
        k8s_namespace="ml-jobs",
        k8s_instance_type_label="beta.kubernetes.io/instance-type",
        k8s_capacity_type_label="eks.amazonaws.com/capacityType",
        k8s_termination_grace_s=30,
        k8s_unschedulable_timeout_s=120.0,
        k8s_kueue_queue="gpu",
        k8s_service_account="trainer",
        trainer_image="registry.local/trainer:1",
        public_url="http://gpujobs-api.ml-jobs:8000",
    )
    config = KubernetesLauncherConfig.from_settings(settings, s3_credentials_secret="s3")
    assert config == KubernetesLauncherConfig(
        namespace="ml-jobs",
        default_image="registry.local/trainer:1",
        instance_type_label="beta.kubernetes.io/instance-type",
        capacity_type_label="eks.amazonaws.com/capacityType",
        termination_grace_s=30,
        unschedulable_timeout_s=120.0,
        kueue_queue="gpu",
        service_account="trainer",
        api_url="http://gpujobs-api.ml-jobs:8000",
        s3_credentials_secret="s3",
    )
    empty = KubernetesLauncherConfig.from_settings(Settings())
    assert empty.kueue_queue is None and empty.service_account is None and empty.api_url is None


def test_image_comes_from_the_request_or_the_default(make_request: RequestFactory) -> None:
    _, default = render(make_request(), default_image="trainer:default")
    _, custom = render(make_request(image="trainer:custom"), default_image="trainer:default")
    assert pod_spec(default["job"])["containers"][0]["image"] == "trainer:default"
    assert pod_spec(custom["job"])["containers"][0]["image"] == "trainer:custom"

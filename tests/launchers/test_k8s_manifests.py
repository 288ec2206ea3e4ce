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
from tests.launchers.pod_security import restricted_violations
from worker.launchers.base import LaunchRequest
from worker.launchers.kubernetes import KubernetesLauncherConfig, Toleration
from worker.launchers.kubernetes.config import (
    PROFILES,
    TrainerResources,
    TrainerS3Keys,
    custom_profile,
    profile_from_settings,
)
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
        trainer_s3_keys=TrainerS3Keys("AKIDTRAINER", "trainer-secret"),
        image_pull_secrets=("regcred",),
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
    # Burstable with requests, so the kubelet never ranks it with BestEffort pods.
    assert container["resources"] == {
        "requests": {"cpu": "32000m", "memory": f"{8 * 16 * 1024}Mi"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    # PID 1 is the supervisor, which starts the ranks itself and forwards the notice.
    assert container["command"] == ["python", "-m", "trainer.supervisor"]
    assert container["args"] == [
        "--nnodes=1",
        "--nproc-per-node=8",
        "--master-addr=127.0.0.1",
        "--master-port=29500",
        "--grace-s=115",
    ]
    shm, scratch = pod["volumes"]
    assert shm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8192Mi"}}
    assert scratch == {"name": "scratch", "emptyDir": {}}
    assert container["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    # Any runAsUser, with or without a passwd entry in the image: who it is and where it writes.
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["USER"] == env["LOGNAME"] == "trainer"
    assert env["HOME"] == "/scratch"
    for key in ("TMPDIR", "TORCH_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        assert env[key].startswith("/scratch/"), key


def test_guaranteed_qos_sets_limits_equal_to_requests(make_request: RequestFactory) -> None:
    resources = TrainerResources(cpu_per_gpu=2, memory_gib_per_gpu=10, guaranteed=True)
    _, objects = render(make_request(gpus_per_node=2), resources=resources)
    container = pod_spec(objects["job"])["containers"][0]
    requests = {"cpu": "4000m", "memory": "20480Mi"}
    assert container["resources"] == {
        "requests": requests,
        "limits": {**requests, "nvidia.com/gpu": "2"},
    }


def test_multi_node_job_rendezvous_through_headless_service(make_request: RequestFactory) -> None:
    _, objects = render(make_request(nodes=4, gpus_per_node=8))
    job, service = objects["job"], objects["service"]
    name = job["metadata"]["name"]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    pod = pod_spec(job)
    assert pod["subdomain"] == service["metadata"]["name"] == name
    assert f"--master-addr={name}-0.{name}" in pod["containers"][0]["args"]
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
    # The disruption first: a disrupted pod's trainer exits 75 too, and the first rule that
    # matches is the one the Job's condition names once its pods are gone.
    assert rules == [
        {
            "action": "FailJob",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        },
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [75, 76]},
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
        request,
        trainer_s3_keys=TrainerS3Keys("AKIDTRAINER", "trainer-secret"),
        api_url="http://api.gpujobs.svc:8000",
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
    # The trainers' own S3 keys, from the attempt's Secret too, never inline.
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": manifests.secret.metadata.name,
        "key": "aws-access-key-id",
    }
    assert base64.b64decode(secret["data"]["aws-secret-access-key"]).decode() == "trainer-secret"
    assert "trainer-secret" not in json.dumps(objects["job"])


def test_api_url_of_the_run_config_is_kept_without_override(make_request: RequestFactory) -> None:
    _, objects = render(make_request())
    config = json.loads(env_of(objects["job"])[ENV_RUN_CONFIG_JSON]["value"])
    assert config["api_url"] == "http://gpujobs-api:8000"


# What each profile asks of a node, per capacity type: (nodeSelector capacity labels,
# required node affinity terms, extra tolerations as (key, value)), and its grace period.
GKE_NOT_SPOT = [
    [
        {"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"},
        {"key": "cloud.google.com/gke-preemptible", "operator": "DoesNotExist"},
    ]
]
AKS_NOT_SPOT = [
    [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "NotIn", "values": ["spot"]}]
]
EXPECTED_PLACEMENT: dict[str, dict[CapacityType, tuple[dict[str, str], Any, set[Any]]]] = {
    "karpenter": {
        CapacityType.SPOT: ({"karpenter.sh/capacity-type": "spot"}, None, set()),
        CapacityType.ON_DEMAND: ({"karpenter.sh/capacity-type": "on-demand"}, None, set()),
        CapacityType.RESERVED: ({"karpenter.sh/capacity-type": "reserved"}, None, set()),
    },
    "eks": {
        CapacityType.SPOT: ({"eks.amazonaws.com/capacityType": "SPOT"}, None, set()),
        CapacityType.ON_DEMAND: ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, None, set()),
        CapacityType.RESERVED: ({"eks.amazonaws.com/capacityType": "CAPACITY_BLOCK"}, None, set()),
    },
    "gke": {
        CapacityType.SPOT: (
            {},
            [
                [{"key": "cloud.google.com/gke-spot", "operator": "In", "values": ["true"]}],
                [{"key": "cloud.google.com/gke-preemptible", "operator": "In", "values": ["true"]}],
            ],
            {("cloud.google.com/gke-spot", "true"), ("cloud.google.com/gke-preemptible", "true")},
        ),
        CapacityType.ON_DEMAND: ({}, GKE_NOT_SPOT, set()),
        CapacityType.RESERVED: ({}, GKE_NOT_SPOT, set()),
    },
    "aks": {
        CapacityType.SPOT: (
            {"kubernetes.azure.com/scalesetpriority": "spot"},
            None,
            {("kubernetes.azure.com/scalesetpriority", "spot")},
        ),
        CapacityType.ON_DEMAND: ({}, AKS_NOT_SPOT, set()),
        CapacityType.RESERVED: ({}, AKS_NOT_SPOT, set()),
    },
}
EXPECTED_GRACE = {"karpenter": 120, "eks": 120, "gke": 25, "aks": 25}


def _required_terms(pod: ApiDict) -> Any:
    affinity = pod.get("affinity")
    if affinity is None:
        return None
    required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [term["matchExpressions"] for term in required["nodeSelectorTerms"]]


@pytest.mark.parametrize("profile", sorted(EXPECTED_PLACEMENT))
@pytest.mark.parametrize("capacity", list(CapacityType))
def test_each_cloud_profile_places_each_capacity_type(
    make_request: RequestFactory, profile: str, capacity: CapacityType
) -> None:
    labels, terms, tolerated = EXPECTED_PLACEMENT[profile][capacity]
    _, objects = render(
        make_request(capacity_type=capacity, nodes=2), capacity_profile=PROFILES[profile]
    )
    for obj in objects.values():
        assert_valid(obj)
    pod = pod_spec(objects["job"])
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p4d.24xlarge", **labels}
    assert _required_terms(pod) == terms
    extra = {(t["key"], t.get("value")) for t in pod["tolerations"]} - {("nvidia.com/gpu", None)}
    assert extra == tolerated
    for toleration in pod["tolerations"]:
        assert toleration["effect"] == "NoSchedule"
    grace = EXPECTED_GRACE[profile]
    assert pod["terminationGracePeriodSeconds"] == grace
    # The ranks get the grace period less a margin: the supervisor exits before the SIGKILL.
    (rank_grace,) = [a for a in pod["containers"][0]["args"] if a.startswith("--grace-s=")]
    assert 0 < int(rank_grace.split("=")[1]) < grace


def test_custom_profile_and_extra_spot_taints(make_request: RequestFactory) -> None:
    config: dict[str, Any] = {
        "capacity_profile": custom_profile(
            "node.example.com/lifecycle", {CapacityType.SPOT: "preemptible"}
        ),
        "spot_tolerations": (
            Toleration.of_taint("node.example.com/lifecycle=preemptible:NoExecute"),
        ),
        "zone_label": "topology.kubernetes.io/zone",
        "termination_grace_s": 60,
    }
    _, spot = render(make_request(capacity_type=CapacityType.SPOT), **config)
    _, on_demand = render(make_request(capacity_type=CapacityType.ON_DEMAND), **config)
    spot_pod, on_demand_pod = pod_spec(spot["job"]), pod_spec(on_demand["job"])
    assert spot_pod["nodeSelector"]["node.example.com/lifecycle"] == "preemptible"
    assert spot_pod["nodeSelector"]["topology.kubernetes.io/zone"] == "us-east-1a"
    # Values not given are Karpenter's.
    assert on_demand_pod["nodeSelector"]["node.example.com/lifecycle"] == "on-demand"
    assert {
        "key": "node.example.com/lifecycle",
        "operator": "Equal",
        "value": "preemptible",
        "effect": "NoExecute",
    } in spot_pod["tolerations"]
    assert [t["key"] for t in on_demand_pod["tolerations"]] == ["nvidia.com/gpu"]
    assert spot_pod["terminationGracePeriodSeconds"] == 60
    for obj in (*spot.values(), *on_demand.values()):
        assert_valid(obj)


@pytest.mark.parametrize(
    ("taint", "expected"),
    [
        ("a.io/spot=true:NoSchedule", Toleration("a.io/spot", "Equal", "true", "NoSchedule")),
        ("a.io/spot:NoExecute", Toleration("a.io/spot", "Exists", None, "NoExecute")),
    ],
)
def test_taints_become_tolerations(taint: str, expected: Toleration) -> None:
    assert Toleration.of_taint(taint) == expected


@pytest.mark.parametrize("taint", ["a.io/spot=true", "a.io/spot:Sometimes", ":NoSchedule"])
def test_malformed_taints_are_refused(taint: str) -> None:
    with pytest.raises(ValueError, match="taint"):
        Toleration.of_taint(taint)


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
        k8s_capacity_profile="gke",
        k8s_spot_taints=["pool=spot:NoSchedule"],
        k8s_unschedulable_timeout_s=120.0,
        k8s_autoscaler_verdict=False,
        k8s_start_timeout_s=90.0,
        k8s_kueue_queue="gpu",
        k8s_service_account="trainer",
        k8s_image_pull_secrets=["regcred"],
        k8s_cpu_per_gpu=6,
        k8s_memory_gib_per_gpu=40,
        k8s_trainer_qos="guaranteed",
        k8s_shm_size_gib=16,
        k8s_run_as_user=2000,
        k8s_trainer_s3_access_key_id="AKIDTRAINER",
        k8s_trainer_s3_secret_access_key="trainer-secret",
        trainer_image="registry.local/trainer:1",
        public_url="http://gpujobs-api.ml-jobs:8000",
    )
    config = KubernetesLauncherConfig.from_settings(settings)
    assert config == KubernetesLauncherConfig(
        namespace="ml-jobs",
        default_image="registry.local/trainer:1",
        instance_type_label="beta.kubernetes.io/instance-type",
        capacity_profile=PROFILES["gke"],
        spot_tolerations=(Toleration("pool", "Equal", "spot"),),
        unschedulable_timeout_s=120.0,
        autoscaler_verdict=False,
        start_timeout_s=90.0,
        kueue_queue="gpu",
        service_account="trainer",
        image_pull_secrets=("regcred",),
        resources=TrainerResources(
            cpu_per_gpu=6, memory_gib_per_gpu=40, guaranteed=True, shm_size_gib=16
        ),
        run_as_user=2000,
        trainer_s3_keys=TrainerS3Keys("AKIDTRAINER", "trainer-secret"),
        api_url="http://gpujobs-api.ml-jobs:8000",
    )
    assert config.grace_s == 25  # GKE's, unless set
    assert (
        KubernetesLauncherConfig.from_settings(
            Settings(k8s_capacity_profile="gke", k8s_termination_grace_s=20)
        ).grace_s
        == 20
    )
    empty = KubernetesLauncherConfig.from_settings(Settings())
    assert empty.kueue_queue is None and empty.service_account is None and empty.api_url is None
    assert empty.trainer_s3_keys is None and empty.capacity_profile is PROFILES["karpenter"]


def test_custom_profile_from_settings() -> None:
    settings = Settings(
        k8s_capacity_profile="custom",
        k8s_capacity_type_label="example.com/capacity",
        k8s_capacity_type_values={"spot": "cheap"},
    )
    profile = profile_from_settings(settings)
    assert profile.placement(CapacityType.SPOT).labels == {"example.com/capacity": "cheap"}
    assert profile.placement(CapacityType.ON_DEMAND).labels == {"example.com/capacity": "on-demand"}


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"k8s_capacity_profile": "custom"}, "k8s_capacity_type_label"),
        ({"k8s_capacity_type_label": "x"}, "custom only"),
        ({"k8s_spot_taints": ["no-effect"]}, "k8s_spot_taints"),
        ({"k8s_trainer_s3_access_key_id": "AKID"}, "k8s_trainer_s3_secret_access_key"),
        ({"k8s_capacity_profile": "openstack"}, "k8s_capacity_profile"),
        ({"k8s_termination_grace_s": -1}, "k8s_termination_grace_s"),
    ],
)
def test_bad_k8s_settings_are_refused_naming_the_field(
    settings: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        Settings(**settings)


def test_image_comes_from_the_request_or_the_default(make_request: RequestFactory) -> None:
    _, default = render(make_request(), default_image="trainer:default")
    _, custom = render(make_request(image="trainer:custom"), default_image="trainer:default")
    assert pod_spec(default["job"])["containers"][0]["image"] == "trainer:default"
    assert pod_spec(custom["job"])["containers"][0]["image"] == "trainer:custom"


# -- what a trainer pod is and what it can read -------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("capacity", list(CapacityType))
@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("keys", [None, TrainerS3Keys("AKID", "secret")])
def test_every_trainer_pod_passes_the_restricted_pod_security_profile(
    make_request: RequestFactory,
    profile: str,
    capacity: CapacityType,
    nodes: int,
    keys: TrainerS3Keys | None,
) -> None:
    _, objects = render(
        make_request(capacity_type=capacity, nodes=nodes),
        capacity_profile=PROFILES[profile],
        trainer_s3_keys=keys,
        image_pull_secrets=("regcred",),
    )
    template = objects["job"]["spec"]["template"]
    assert restricted_violations(template["spec"], template["metadata"].get("annotations")) == []


def _unset(spec: ApiDict, key: str) -> None:
    """Drop a security setting at the pod and the container level."""
    spec["securityContext"].pop(key)
    spec["containers"][0]["securityContext"].pop(key)


def test_the_restricted_check_catches_each_kind_of_breach(make_request: RequestFactory) -> None:
    """The checker above is only worth something if it fails on what the profile forbids."""
    _, objects = render(make_request())
    breaches: list[tuple[str, Callable[[ApiDict], None]]] = [
        ("runAsNonRoot", lambda p: _unset(p, "runAsNonRoot")),
        ("runAsUser 0", lambda p: p["securityContext"].update(runAsUser=0)),
        ("allowPrivilegeEscalation", lambda p: p["containers"][0]["securityContext"].pop(
            "allowPrivilegeEscalation")),
        ("capabilities.drop", lambda p: p["containers"][0]["securityContext"].pop("capabilities")),
        ("capabilities.add", lambda p: p["containers"][0]["securityContext"]["capabilities"]
         .update(add=["SYS_ADMIN"])),
        ("seccompProfile", lambda p: _unset(p, "seccompProfile")),
        ("hostPath", lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
        ("hostNetwork", lambda p: p.update(hostNetwork=True)),
        ("privileged", lambda p: p["containers"][0]["securityContext"].update(privileged=True)),
    ]  # fmt: skip
    for expected, breach in breaches:
        spec = json.loads(json.dumps(pod_spec(objects["job"])))
        breach(spec)
        problems = restricted_violations(spec)
        assert any(expected in problem for problem in problems), (expected, problems)


# Plain (non-Secret) env of a trainer never carries credentials: those come from the attempt's
# Secret, key by key. The plain names are the run config and the runtime's allowlist.
CREDENTIAL_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|KEY|^AWS_|DATABASE|BROKER")
# What the control plane holds; an implementation that inherited its environment or Secret
# would leak these.
CONTROL_PLANE_SECRETS = {
    "GPUJOBS_ADMIN_TOKEN": "cp-admin-token-123",
    "GPUJOBS_DATABASE_URL": "postgresql+psycopg://gj:cp-db-password@db/gj",
    "AWS_ACCESS_KEY_ID": "AKIDCONTROLPLANE",
    "AWS_SECRET_ACCESS_KEY": "cp-s3-secret",
}


@pytest.mark.parametrize("keys", [None, TrainerS3Keys("AKIDTRAINER", "trainer-secret")])
def test_a_trainer_pod_can_read_only_its_own_secret(
    make_request: RequestFactory,
    keys: TrainerS3Keys | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Env, envFrom, volumes, Secrets and the service account token: nothing beyond the
    attempt's own Secret (its token, and the trainers' S3 keys when static keys are set)."""
    for name, value in CONTROL_PLANE_SECRETS.items():
        monkeypatch.setenv(name, value)
    manifests, objects = render(
        make_request(nodes=2, env={"WANDB_MODE": "offline"}),
        trainer_s3_keys=keys,
        service_account="trainer",
        image_pull_secrets=("regcred",),
    )
    own_secret = manifests.secret.metadata.name
    pod = pod_spec(objects["job"])
    assert pod["automountServiceAccountToken"] is False
    assert pod.get("enableServiceLinks") is False  # no other Services' addresses in env
    # Volumes: only the bounded shared memory, where PyTorch expects it, and the pod's scratch.
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8192Mi"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    assert "initContainers" not in pod and len(pod["containers"]) == 1
    container = pod["containers"][0]
    assert "envFrom" not in container  # no whole Secret or ConfigMap
    assert container["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    expected_secret_env = {ENV_JOB_TOKEN: "token"}
    if keys is not None:
        expected_secret_env |= {
            "AWS_ACCESS_KEY_ID": "aws-access-key-id",
            "AWS_SECRET_ACCESS_KEY": "aws-secret-access-key",
        }
    secret_env: dict[str, str] = {}
    for var in container["env"]:
        if "valueFrom" in var:
            ref = var["valueFrom"]["secretKeyRef"]  # no configMap, field or resource refs
            assert set(var["valueFrom"]) == {"secretKeyRef"}
            assert ref["name"] == own_secret
            secret_env[var["name"]] = ref["key"]
        else:
            assert var["name"] == ENV_RUN_CONFIG_JSON or not CREDENTIAL_NAME.search(var["name"])
    assert secret_env == expected_secret_env
    # The attempt's Secret holds exactly what the env reads from it.
    assert set(objects["secret"]["data"]) == set(expected_secret_env.values())
    # Image pull secrets are the kubelet's, not readable from the container.
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    # Nothing else names a Secret anywhere in the Job.
    text = json.dumps(objects["job"])
    assert set(re.findall(r'"name": "(gpujobs-token-[^"]+)"', text)) == {own_secret}
    assert "AKIDTRAINER" not in text and "trainer-secret" not in text
    assert env_of(objects["job"])["WANDB_MODE"]["value"] == "offline"  # the team's own env
    everything = json.dumps(objects)
    for name, value in CONTROL_PLANE_SECRETS.items():
        assert value not in everything, name

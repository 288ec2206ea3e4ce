"""The Helm chart: renders, lints, every manifest is valid Kubernetes 1.33, settings in sync."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from kubernetes.client import ApiClient

from api.settings import setting_names
from gpujobs.runtime import RunConfig
from gpujobs.spec import CapacityType, TrainerSpec
from tests.deploy.support import (
    AWS_KEYS,
    PROD_SETTINGS,
    REPO,
    settings_from_env,
    unknown_settings_keys,
)
from tests.launchers.k8s_calls import (
    API_ENTRY_POINTS,
    WORKER_ENTRY_POINTS,
    Call,
    launcher_calls,
)
from tests.launchers.pod_security import restricted_violations
from tests.worker.support import a_placement
from worker.launchers.base import LaunchRequest
from worker.launchers.kubernetes import KubernetesLauncherConfig
from worker.launchers.kubernetes.manifests import build_manifests

CHART = REPO / "deploy" / "helm" / "gpujobs"
KUBE_VERSION = "1.33.0"
RELEASE = "gpujobs"
NAMESPACE = "gpujobs-system"

DEFAULTS: dict[str, Any] = {}
# Everything optional switched on, and the secrets managed outside the chart.
FULL: dict[str, Any] = {
    "existingSecret": "gpujobs-prod",
    "jobs": {"namespace": "training", "kueueQueue": "gpu-queue"},
    "trainer": {
        "image": {"repository": "registry.example.com/gpujobs/trainer", "tag": "1.2.3"},
        "imagePullSecrets": ["trainer-regcred"],
        "resources": {"cpuPerGpu": 8, "memoryGiBPerGpu": 60, "qos": "guaranteed"},
        "shmSizeGiB": 32,
        "serviceAccount": {
            "create": True,
            "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/trainer"},
        },
    },
    "s3": {"checkpointUri": "s3://ckpt/gpujobs", "endpointUrl": "https://s3.example.com"},
    "publicUrl": "https://gpujobs.example.com",
    "extraSettings": {"schedule_interval_s": 5, "no_capacity_backoff_s": 600},
    "extraEnv": [{"name": "TZ", "value": "UTC"}],
    "imagePullSecrets": [{"name": "regcred"}],
    "nodeSelector": {"node-role/control-plane-apps": "true"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}
    ],
    "api": {
        "replicas": 3,
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
            "hosts": [
                {"host": "gpujobs.example.com", "paths": [{"path": "/", "pathType": "Prefix"}]}
            ],
            "tls": [{"secretName": "gpujobs-tls", "hosts": ["gpujobs.example.com"]}],
        },
    },
    "worker": {
        "concurrency": 4,
        "args": ["--max-tasks-per-child=100"],
        "livenessProbe": {
            "exec": {"command": ["celery", "-A", "worker.celery_app", "inspect", "ping"]},
            "periodSeconds": 60,
            "timeoutSeconds": 20,
        },
    },
}
# The chart's own Secret, with static S3 keys and a fixed admin token.
STATIC_S3: dict[str, Any] = {
    "database": {"url": "postgresql+psycopg://app:pw@db.internal:5432/gpujobs"},
    "adminToken": "not-a-real-token",
    "s3": {
        "accessKeyId": "AKIDEXAMPLE",
        "secretAccessKey": "secret",
        "endpointUrl": "http://s3:8333",
    },
    "trainer": {"s3": {"accessKeyId": "AKIDTRAINER", "secretAccessKey": "trainer-secret"}},
}
# One per cloud: how spot and on-demand nodes are told apart there.
PROFILE_CASES: dict[str, dict[str, Any]] = {
    "eks": {"jobs": {"capacityProfile": "eks"}},
    "gke": {"jobs": {"capacityProfile": "gke"}},
    "aks": {"jobs": {"capacityProfile": "aks", "spotTaints": ["pool=gpu-spot:NoSchedule"]}},
    "custom": {
        "jobs": {
            "capacityProfile": "custom",
            "capacityTypeLabel": "node.example.com/lifecycle",
            "capacityTypeValues": {"spot": "preemptible", "on_demand": "normal"},
            "terminationGraceSeconds": 60,
        }
    },
}
CASES = {"defaults": DEFAULTS, "full": FULL, "static-s3": STATIC_S3, **PROFILE_CASES}


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    values = CASES[request.param]
    return values, _render(values)


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [obj for obj in _by_kind(objects, kind) if obj["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def _pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        if obj["kind"] in ("Deployment", "Job"):
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_chart_lints_clean(name: str) -> None:
    report = helm.lint(CHART, CASES[name], strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert problems == []


def test_every_manifest_is_valid_kubernetes(case: tuple[dict, list[dict[str, Any]]]) -> None:
    _, objects = case
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_components_exist(case: tuple[dict, list[dict[str, Any]]]) -> None:
    values, objects = case
    for name in ("gpujobs-api", "gpujobs-worker", "gpujobs-beat"):
        _one(objects, "Deployment", name)
    _one(objects, "Service", "gpujobs-api")
    _one(objects, "ConfigMap", "gpujobs")
    _one(objects, "ServiceAccount", "gpujobs")
    _one(objects, "ServiceAccount", "gpujobs-api")
    assert len(_by_kind(objects, "Ingress")) == (1 if values is FULL else 0)


def test_entry_points_and_probes(case: tuple[dict, list[dict[str, Any]]]) -> None:
    values, objects = case
    api = _one(objects, "Deployment", "gpujobs-api")["spec"]["template"]["spec"]["containers"][0]
    assert api["command"][:3] == ["python", "-m", "worker.api_app"]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    worker = _one(objects, "Deployment", "gpujobs-worker")["spec"]["template"]["spec"]
    concurrency = values.get("worker", {}).get("concurrency", 2)
    # Bounded: Celery's default is the node's CPU count, whatever the pod's limit.
    assert worker["containers"][0]["command"] == [
        "celery",
        "-A",
        "worker.celery_app",
        "worker",
        "--loglevel=INFO",
        f"--concurrency={concurrency}",
    ]
    beat = _one(objects, "Deployment", "gpujobs-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert beat["spec"]["template"]["spec"]["containers"][0]["command"][:4] == [
        "celery",
        "-A",
        "worker.celery_app",
        "beat",
    ]


def test_migrations_run_as_a_pre_install_and_pre_upgrade_hook(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    values, objects = case
    job = _one(objects, "Job", "gpujobs-migrate")
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert hooks == {"pre-install", "pre-upgrade"}
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["alembic", "upgrade", "head"]
    assert container["image"].startswith("ghcr.io/gpujobs/api:")
    # Hooks run before the release's own objects exist: the Job's Secret must be there already
    # (existingSecret) or be a hook itself, created first.
    (secret_name,) = [src["secretRef"]["name"] for src in container["envFrom"]]
    if values.get("existingSecret"):
        assert secret_name == values["existingSecret"]
    else:
        secret = _one(objects, "Secret", secret_name)
        annotations = secret["metadata"]["annotations"]
        assert set(annotations["helm.sh/hook"].split(",")) == hooks
        assert int(annotations["helm.sh/hook-weight"]) < int(
            job["metadata"]["annotations"]["helm.sh/hook-weight"]
        )
        assert "GPUJOBS_DATABASE_URL" in secret["stringData"]


def test_configmap_keys_are_settings_fields(
    case: tuple[dict, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    values, objects = case
    data = _one(objects, "ConfigMap", "gpujobs")["data"]
    unknown = unknown_settings_keys(data)
    assert not unknown, f"{sorted(unknown)} are not fields of api.settings.Settings"
    assert {key for key in data if not key.startswith("GPUJOBS_")} == set()
    settings = settings_from_env(monkeypatch, data)  # the values parse, too
    assert settings.launcher == "kubernetes"
    expected_ns = values.get("jobs", {}).get("namespace") or NAMESPACE
    assert settings.kubernetes.k8s_namespace == expected_ns
    assert settings.kubernetes.k8s_kueue_queue == values.get("jobs", {}).get("kueueQueue", "")
    if values is FULL:
        assert settings.kubernetes.trainer_image == "registry.example.com/gpujobs/trainer:1.2.3"
        assert settings.kubernetes.k8s_service_account == "gpujobs-trainer"
        assert settings.schedule_interval_s == 5
        assert settings.public_url == "https://gpujobs.example.com"


def test_secrets_hold_the_rest_of_the_production_settings(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    values, objects = case
    configmap = _one(objects, "ConfigMap", "gpujobs")["data"]
    secrets = [s for s in _by_kind(objects, "Secret") if s["metadata"]["name"] == "gpujobs"]
    if values.get("existingSecret"):
        assert secrets == [], "the chart must not create a Secret when existingSecret is set"
        return
    (secret,) = secrets
    data = secret["stringData"]
    assert not unknown_settings_keys(data)
    assert {key for key in data if not key.startswith("GPUJOBS_")} <= AWS_KEYS
    assert configmap.keys() | data.keys() >= PROD_SETTINGS
    assert data["GPUJOBS_ADMIN_TOKEN"], "an admin token is generated when none is given"
    if values is STATIC_S3:
        assert data["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE"
        assert data["GPUJOBS_ADMIN_TOKEN"] == "not-a-real-token"
    # Secrets never leak into the ConfigMap.
    assert not {"GPUJOBS_DATABASE_URL", "GPUJOBS_ADMIN_TOKEN"} & configmap.keys()


def test_pods_read_the_configmap_and_the_right_secret(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    values, objects = case
    secret_name = values.get("existingSecret") or "gpujobs"
    for name in ("gpujobs-api", "gpujobs-worker", "gpujobs-beat"):
        container = _one(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        refs = container["envFrom"]
        assert {"configMapRef": {"name": "gpujobs"}} in refs, name
        assert {"secretRef": {"name": secret_name}} in refs, name


def test_pods_run_as_non_root_with_scheduling_knobs(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    values, objects = case
    for name, spec in _pod_specs(objects):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] != 0, name
        for container in spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert container.get("resources", {}).get("requests"), name
        if values is FULL:
            assert spec["nodeSelector"] == FULL["nodeSelector"], name
            assert spec["tolerations"] == FULL["tolerations"], name
            assert spec["imagePullSecrets"] == [{"name": "regcred"}], name


def _granted(rules: list[dict[str, Any]], *, namespaced: bool) -> set[Call]:
    return {
        Call(group, resource, verb, namespaced)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _bound_account(objects: list[dict[str, Any]], kind: str, name: str) -> str:
    binding = _one(objects, kind, name)
    assert binding["roleRef"]["name"] == name
    (subject,) = binding["subjects"]
    assert subject["namespace"] == NAMESPACE
    return str(subject["name"])


def test_rbac_grants_exactly_the_calls_the_launcher_makes(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    """Derived from the code: tests/launchers/k8s_calls.py reads every API call the launcher
    can make (and test_k8s_launcher checks that read against the requests it really sends)."""
    values, objects = case
    jobs_namespace = values.get("jobs", {}).get("namespace") or NAMESPACE
    calls = launcher_calls(*WORKER_ENTRY_POINTS)
    role = _one(objects, "Role", "gpujobs-launcher")
    assert role["metadata"]["namespace"] == jobs_namespace
    assert _granted(role["rules"], namespaced=True) == {c for c in calls if c.namespaced}
    (cluster_role,) = _by_kind(objects, "ClusterRole")
    assert _granted(cluster_role["rules"], namespaced=False) == {
        c for c in calls if not c.namespaced
    }
    worker_account = _bound_account(objects, "RoleBinding", "gpujobs-launcher")
    assert _bound_account(objects, "ClusterRoleBinding", cluster_role["metadata"]["name"]) == (
        worker_account
    )
    worker = _one(objects, "Deployment", "gpujobs-worker")["spec"]["template"]["spec"]
    assert worker["serviceAccountName"] == worker_account
    assert _one(objects, "ServiceAccount", worker_account)["metadata"]["namespace"] == NAMESPACE


def test_api_has_its_own_account_that_can_only_read_logs(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    values, objects = case
    jobs_namespace = values.get("jobs", {}).get("namespace") or NAMESPACE
    api = _one(objects, "Deployment", "gpujobs-api")["spec"]["template"]["spec"]
    account = api["serviceAccountName"]
    assert account == "gpujobs-api" != _bound_account(objects, "RoleBinding", "gpujobs-launcher")
    # The API reads trainer logs through the Kubernetes API, nothing more.
    assert api["automountServiceAccountToken"] is True
    role = _one(objects, "Role", "gpujobs-log-reader")
    assert role["metadata"]["namespace"] == jobs_namespace
    assert _granted(role["rules"], namespaced=True) == launcher_calls(*API_ENTRY_POINTS)
    assert _bound_account(objects, "RoleBinding", "gpujobs-log-reader") == account
    bindings = [*_by_kind(objects, "RoleBinding"), *_by_kind(objects, "ClusterRoleBinding")]
    bound = [b["metadata"]["name"] for b in bindings if b["subjects"][0]["name"] == account]
    assert bound == ["gpujobs-log-reader"]
    # Its token is mounted nowhere by default; beat and migrations never get one.
    assert _one(objects, "ServiceAccount", account)["automountServiceAccountToken"] is False
    beat = _one(objects, "Deployment", "gpujobs-beat")["spec"]["template"]["spec"]
    assert beat["automountServiceAccountToken"] is False


def test_without_the_kubernetes_launcher_the_api_gets_no_token() -> None:
    objects = _render({"launcher": "local"})
    api = _one(objects, "Deployment", "gpujobs-api")["spec"]["template"]["spec"]
    assert api["automountServiceAccountToken"] is False
    assert [r["metadata"]["name"] for r in _by_kind(objects, "Role")] == ["gpujobs-launcher"]


def test_trainer_account(case: tuple[dict, list[dict[str, Any]]]) -> None:
    values, objects = case
    trainers = [
        sa
        for sa in _by_kind(objects, "ServiceAccount")
        if sa["metadata"]["name"] not in ("gpujobs", "gpujobs-api")
    ]
    if values is FULL:
        (trainer,) = trainers
        assert trainer["metadata"]["name"] == "gpujobs-trainer"
        assert trainer["metadata"]["namespace"] == "training"
        assert "eks.amazonaws.com/role-arn" in trainer["metadata"]["annotations"]
        assert trainer["automountServiceAccountToken"] is False
    else:
        assert trainers == []


def test_api_has_a_disruption_budget_and_an_autoscaler(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    _, objects = case
    api = _one(objects, "Deployment", "gpujobs-api")
    selector = api["spec"]["selector"]["matchLabels"]
    pdb = _one(objects, "PodDisruptionBudget", "gpujobs-api")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["minAvailable"] == 1
    hpa = _one(objects, "HorizontalPodAutoscaler", "gpujobs-api")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "gpujobs-api",
    }
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    # The HPA owns the replica count: the Deployment must not reset it on every upgrade.
    assert "replicas" not in api["spec"]
    fixed = _render({"api": {"autoscaling": {"enabled": False}, "replicas": 3}})
    assert _by_kind(fixed, "HorizontalPodAutoscaler") == []
    assert _one(fixed, "Deployment", "gpujobs-api")["spec"]["replicas"] == 3


def test_every_chart_pod_passes_the_restricted_pod_security_profile(
    case: tuple[dict, list[dict[str, Any]]],
) -> None:
    _, objects = case
    for name, spec in _pod_specs(objects):
        assert restricted_violations(spec) == [], name


# -- the trainer pods the chart's settings produce, per cloud ----------------------------------

EXPECTED_SPOT_SELECTOR = {
    "defaults": {"karpenter.sh/capacity-type": "spot"},
    "eks": {"eks.amazonaws.com/capacityType": "SPOT"},
    "gke": {},  # node affinity: gke-spot or gke-preemptible
    "aks": {"kubernetes.azure.com/scalesetpriority": "spot"},
    "custom": {"node.example.com/lifecycle": "preemptible"},
}
EXPECTED_GRACE = {"defaults": 120, "eks": 120, "gke": 25, "aks": 25, "custom": 60}


@pytest.mark.parametrize("name", sorted(EXPECTED_SPOT_SELECTOR))
@pytest.mark.parametrize("capacity", list(CapacityType))
def test_trainer_jobs_from_each_cloud_profile_are_valid(
    name: str, capacity: CapacityType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart's ConfigMap and Secret become the worker's Settings, which shape the Job."""
    values = CASES[name]
    objects = _render(values)
    env = dict(_one(objects, "ConfigMap", "gpujobs")["data"])
    env.update(_one(objects, "Secret", "gpujobs")["stringData"])
    config = KubernetesLauncherConfig.from_settings(settings_from_env(monkeypatch, env))
    request = LaunchRequest(
        job_id="job-1",
        attempt_id="att-1",
        attempt_number=1,
        job_name="demo",
        team="acme",
        placement=a_placement(capacity, nodes=2),
        gpus_per_node=1,
        run_config=RunConfig(trainer=TrainerSpec(steps=10), checkpoint_uri="s3://b/p"),
        job_token="tok",
    )
    manifests = build_manifests(request, config)
    api = ApiClient()
    for obj in (manifests.job, manifests.secret, manifests.service):
        kubernetes_validate.validate(api.sanitize_for_serialization(obj), KUBE_VERSION, strict=True)
    pod = api.sanitize_for_serialization(manifests.job)["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["terminationGracePeriodSeconds"] == EXPECTED_GRACE[name]
    if capacity is CapacityType.SPOT:
        selector = dict(pod["nodeSelector"])
        selector.pop("node.kubernetes.io/instance-type")
        assert selector == EXPECTED_SPOT_SELECTOR[name]
    if name == "aks" and capacity is CapacityType.SPOT:
        keys = {(t["key"], t.get("value")) for t in pod["tolerations"]}
        assert {("kubernetes.azure.com/scalesetpriority", "spot"), ("pool", "gpu-spot")} <= keys


def test_trainer_settings_reach_the_worker() -> None:
    objects = _render({**FULL, "existingSecret": ""})
    data = _one(objects, "ConfigMap", "gpujobs")["data"]
    assert json.loads(data["GPUJOBS_K8S_IMAGE_PULL_SECRETS"]) == ["trainer-regcred"]
    assert data["GPUJOBS_K8S_TRAINER_QOS"] == "guaranteed"
    assert data["GPUJOBS_K8S_SHM_SIZE_GIB"] == "32"
    secret = _one(_render(STATIC_S3), "Secret", "gpujobs")["stringData"]
    # The trainers' keys travel apart from the control plane's own.
    assert secret["GPUJOBS_K8S_TRAINER_S3_ACCESS_KEY_ID"] == "AKIDTRAINER"
    assert secret["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE"
    assert data["GPUJOBS_STORAGE_CREDENTIALS"] == "static"


def test_per_attempt_storage_credentials_reach_the_worker() -> None:
    values = {"trainer": {"s3": {"credentials": "iam_users", "iamEndpointUrl": "http://s3:8333"}}}
    data = _one(_render(values), "ConfigMap", "gpujobs")["data"]
    assert data["GPUJOBS_STORAGE_CREDENTIALS"] == "iam_users"
    assert data["GPUJOBS_STORAGE_IAM_ENDPOINT_URL"] == "http://s3:8333"


def test_per_attempt_storage_credentials_refuse_static_trainer_keys() -> None:
    values = {"trainer": {"s3": {"credentials": "iam_users", "accessKeyId": "AKID"}}}
    with pytest.raises(helm.HelmRenderError, match="never used"):
        _render(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"jobs": {"capacityProfile": "custom"}}, "capacityTypeLabel is required"),
        ({"jobs": {"capacityTypeLabel": "x"}}, "custom only"),
    ],
)
def test_inconsistent_capacity_values_fail_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        _render(values)


def test_ingress_routes_to_the_api_service() -> None:
    (ingress,) = _by_kind(_render(FULL), "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["gpujobs.example.com"], "secretName": "gpujobs-tls"}
    ]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "gpujobs-api", "port": {"name": "http"}}


def test_missing_database_url_fails_the_render() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"database\.url is required"):
        _render({"database": {"url": ""}})


@pytest.mark.parametrize(
    "key", ["no_such_setting", "k8s_namespace", "admin_token", "metrics_token"]
)
def test_extra_settings_take_only_free_settings_fields(key: str) -> None:
    """Unknown names, names the chart sets itself, and secrets are refused before rendering."""
    with pytest.raises(helm.HelmValuesError, match=key):
        _render({"extraSettings": {key: "x"}})


def test_values_schema_lists_every_other_settings_field() -> None:
    """extraSettings' allowed names = Settings fields the chart does not set or keep secret."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = set(schema["properties"]["extraSettings"]["propertyNames"]["enum"])
    keys: set[str] = set()
    for values in (DEFAULTS, PROFILE_CASES["custom"]):
        keys |= set(_one(_render(values), "ConfigMap", "gpujobs")["data"])
    set_by_chart = {key.removeprefix("GPUJOBS_").lower() for key in keys}
    secrets = {"database_url", "admin_token", "metrics_token"} | {
        "k8s_trainer_s3_access_key_id",
        "k8s_trainer_s3_secret_access_key",
    }
    expected = set(setting_names()) - set_by_chart - secrets
    assert allowed == expected, (
        "update extraSettings.propertyNames.enum in values.schema.json to match Settings: "
        f"add {sorted(expected - allowed)}, drop {sorted(allowed - expected)}"
    )


# -- values.schema.json ---------------------------------------------------------------------------


def _schema() -> dict[str, Any]:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def _walk(values: dict[str, Any], schema: dict[str, Any], path: str) -> Iterator[str]:
    """Problems: values without a described, typed schema entry, and schema entries of closed
    objects that values.yaml does not have."""
    properties = schema.get("properties", {})
    for key, value in values.items():
        where = f"{path}.{key}".lstrip(".")
        entry = properties.get(key)
        if entry is None:
            yield f"{where}: not in the schema"
            continue
        if not entry.get("description") or "type" not in entry:
            yield f"{where}: no description or type"
        if isinstance(value, dict) and "properties" in entry:
            yield from _walk(value, entry, where)
    if schema.get("additionalProperties") is False:
        for key in set(properties) - set(values) - {"global"}:
            yield f"{path}.{key}: in the schema, not in values.yaml"


def test_values_schema_describes_and_types_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = _schema()
    assert schema["additionalProperties"] is False
    assert list(_walk(values, schema, "")) == []


def test_values_schema_closes_the_chart_s_own_objects() -> None:
    """Typos in the chart's own keys fail; maps passed to Kubernetes as they are stay open."""
    open_maps = {
        "tolerations", "affinity", "nodeSelector", "podAnnotations", "podLabels", "annotations",
        "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe",
        "extraEnv", "extraEnvFrom", "hosts", "tls", "extraSettings", "capacityTypeValues",
        "global",
    }  # fmt: skip

    def objects(schema: dict[str, Any], name: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if schema.get("type") == "object":
            yield name, schema
        for key, sub in schema.get("properties", {}).items():
            yield from objects(sub, key)

    for name, schema in objects(_schema(), ""):
        if name not in open_maps:
            assert schema.get("additionalProperties") is False, name


@pytest.mark.parametrize(
    ("values", "name"),
    [
        ({"jobs": {"capacityProfle": "gke"}}, "capacityProfle"),
        ({"jobs": {"capacityProfile": "openstack"}}, "capacityProfile"),
        ({"jobs": {"spotTaints": ["no-effect"]}}, "spotTaints"),
        ({"worker": {"args": ["--concurrency=64"]}}, "args"),
        ({"worker": {"concurrency": 0}}, "concurrency"),
        ({"trainer": {"resources": {"qos": "besteffort"}}}, "qos"),
        ({"api": {"autoscaling": {"minReplicas": "two"}}}, "minReplicas"),
    ],
)
def test_values_schema_refuses_bad_values(values: dict[str, Any], name: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=name):
        _render(values)


def test_install_notes_and_readme_show_the_first_team_command() -> None:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render({}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    (notes,) = [text for path, text in rendered.items() if path.endswith("NOTES.txt")]
    command = f"kubectl -n {NAMESPACE} exec deploy/gpujobs-api -- python -m api.admin create-team"
    assert command in notes
    _one(_render({}), "Deployment", "gpujobs-api")  # the name the command uses
    readme = (REPO / "deploy" / "README.md").read_text()
    assert "kubectl -n gpujobs exec deploy/gpujobs-api -- python -m api.admin create-team acme" in (
        readme
    )


def test_gpu_speeds_reach_the_scheduler_through_extra_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As deploy/README.md shows it: a JSON string, merged over the default table."""
    speeds = '{"A100": 1, "H100": 2.4}'
    objects = _render({"extraSettings": {"gpu_speeds": speeds}})
    env = dict(_one(objects, "ConfigMap", "gpujobs")["data"])
    assert env["GPUJOBS_GPU_SPEEDS"] == speeds
    settings = settings_from_env(monkeypatch, env)
    assert settings.launcher == "kubernetes"
    assert settings.gpu_speeds["H100"] == 2.4 and settings.gpu_speeds["L4"] == 0.25


def test_a_pool_of_alike_nodes_needs_no_instance_type_label() -> None:
    """What `helm install` on the local cluster found (tests/k8s/test_real_helm.py): the schema
    refused the empty label that Settings allows for a pool whose nodes are all alike."""
    values = {**PROFILE_CASES["custom"]}
    values["jobs"] = {**values["jobs"], "instanceTypeLabel": ""}
    config = _one(_render(values), "ConfigMap", "gpujobs")["data"]
    assert config["GPUJOBS_K8S_INSTANCE_TYPE_LABEL"] == ""

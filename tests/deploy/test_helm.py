"""The Helm chart: renders, lints, every manifest is valid Kubernetes 1.33, settings in sync."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from api.settings import Settings
from tests.deploy.support import (
    AWS_KEYS,
    PROD_SETTINGS,
    REPO,
    settings_from_env,
    unknown_settings_keys,
)

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
        "args": ["--concurrency=4"],
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
}
CASES = {"defaults": DEFAULTS, "full": FULL, "static-s3": STATIC_S3}


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
    assert len(_by_kind(objects, "Ingress")) == (1 if values is FULL else 0)


def test_entry_points_and_probes(case: tuple[dict, list[dict[str, Any]]]) -> None:
    _, objects = case
    api = _one(objects, "Deployment", "gpujobs-api")["spec"]["template"]["spec"]["containers"][0]
    assert api["command"][:2] == ["uvicorn", "worker.api_app:app"]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    worker = _one(objects, "Deployment", "gpujobs-worker")["spec"]["template"]["spec"]
    assert worker["containers"][0]["command"] == [
        "celery",
        "-A",
        "worker.celery_app",
        "worker",
        "--loglevel=INFO",
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
    assert settings.k8s_namespace == expected_ns
    assert settings.k8s_kueue_queue == values.get("jobs", {}).get("kueueQueue", "")
    if values is FULL:
        assert settings.trainer_image == "registry.example.com/gpujobs/trainer:1.2.3"
        assert settings.k8s_service_account == "gpujobs-trainer"
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


def _grants(rules: list[dict[str, Any]], group: str, resource: str, verbs: set[str]) -> bool:
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            verbs = verbs - set(rule["verbs"])
    return not verbs


def test_rbac_lets_the_launcher_run_jobs(case: tuple[dict, list[dict[str, Any]]]) -> None:
    values, objects = case
    jobs_namespace = values.get("jobs", {}).get("namespace") or NAMESPACE
    role = _one(objects, "Role", "gpujobs-launcher")
    assert role["metadata"]["namespace"] == jobs_namespace
    rules = role["rules"]
    crud = {"get", "list", "watch", "create", "delete"}
    assert _grants(rules, "batch", "jobs", crud | {"patch"})
    assert _grants(rules, "", "pods", {"get", "list", "watch"})
    assert _grants(rules, "", "pods/log", {"get"})
    assert _grants(rules, "", "services", crud)
    assert _grants(rules, "", "secrets", crud)
    assert _grants(rules, "", "events", {"get", "list", "watch"})

    binding = _one(objects, "RoleBinding", "gpujobs-launcher")
    assert binding["metadata"]["namespace"] == jobs_namespace
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "gpujobs-launcher",
    }
    (subject,) = binding["subjects"]
    account = _one(objects, "ServiceAccount", subject["name"])
    assert subject["namespace"] == account["metadata"]["namespace"] == NAMESPACE
    for name in ("gpujobs-api", "gpujobs-worker"):
        spec = _one(objects, "Deployment", name)["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == subject["name"], name


def test_kueue_and_trainer_account(case: tuple[dict, list[dict[str, Any]]]) -> None:
    values, objects = case
    rules = _one(objects, "Role", "gpujobs-launcher")["rules"]
    kueue = _grants(rules, "kueue.x-k8s.io", "workloads", {"get", "list", "watch"})
    assert kueue == bool(values.get("jobs", {}).get("kueueQueue"))
    trainers = [
        sa for sa in _by_kind(objects, "ServiceAccount") if sa["metadata"]["name"] != "gpujobs"
    ]
    if values is FULL:
        (trainer,) = trainers
        assert trainer["metadata"]["name"] == "gpujobs-trainer"
        assert trainer["metadata"]["namespace"] == "training"
        assert "eks.amazonaws.com/role-arn" in trainer["metadata"]["annotations"]
        assert trainer["automountServiceAccountToken"] is False
    else:
        assert trainers == []


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


@pytest.mark.parametrize("key", ["no_such_setting", "k8s_namespace", "admin_token"])
def test_extra_settings_take_only_free_settings_fields(key: str) -> None:
    """Unknown names, names the chart sets itself, and secrets are refused before rendering."""
    with pytest.raises(helm.HelmValuesError, match=key):
        _render({"extraSettings": {key: "x"}})


def test_values_schema_lists_every_other_settings_field() -> None:
    """extraSettings' allowed names = Settings fields the chart does not set or keep secret."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = set(schema["properties"]["extraSettings"]["propertyNames"]["enum"])
    configmap = _one(_render(DEFAULTS), "ConfigMap", "gpujobs")["data"]
    set_by_chart = {key.removeprefix("GPUJOBS_").lower() for key in configmap}
    expected = set(Settings.model_fields) - set_by_chart - {"database_url", "admin_token"}
    assert allowed == expected, (
        "update extraSettings.propertyNames.enum in values.schema.json to match Settings: "
        f"add {sorted(expected - allowed)}, drop {sorted(allowed - expected)}"
    )

"""The Helm chart's RBAC against the real API server: the launcher, running as the worker's
service account with exactly the chart's Role, launches, observes, reads logs of and cancels an
attempt without one 403; and the account can do nothing more (a `kubectl auth can-i` matrix)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from kubernetes import client

from devstack.cluster import RealCluster
from devstack.s3server import S3Server
from tests.k8s.test_real_launcher import log_of, request, trainer_spec, wait_state
from worker.launchers.base import ObservedState
from worker.launchers.kubernetes import KubernetesLauncher

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(400)]

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpujobs"
RELEASE = "gpujobs"


def chart_rbac(*, release_namespace: str, jobs_namespace: str) -> list[dict[str, Any]]:
    values = {"launcher": "kubernetes", "jobs": {"namespace": jobs_namespace}}
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=release_namespace, is_install=True)
    objects = [
        doc
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    return [o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")]


@pytest.fixture
def release_namespace(real_cluster: RealCluster) -> Iterator[str]:
    name = real_cluster.namespace(restricted=False)
    yield name
    real_cluster.delete_namespace(name)


def token_for(cluster: RealCluster, namespace: str, account: str) -> str:
    body = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    answer = cluster.core.create_namespaced_service_account_token(account, namespace, body)
    return str(answer.status.token)


def as_account(cluster: RealCluster, token: str) -> client.ApiClient:
    admin = cluster.api.configuration
    configuration = client.Configuration()
    configuration.host = admin.host
    configuration.ssl_ca_cert = admin.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def test_the_worker_account_launches_and_cancels_with_the_charts_role_and_can_do_no_more(
    real_cluster: RealCluster, namespace: str, release_namespace: str, pod_s3: str,
    s3_server: S3Server,
) -> None:  # fmt: skip
    rbac = chart_rbac(release_namespace=release_namespace, jobs_namespace=namespace)
    for obj in rbac:
        real_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    (worker,) = [
        o["metadata"]["name"]
        for o in rbac
        if o["kind"] == "ServiceAccount" and "api" not in o["metadata"]["name"]
    ]
    who = f"system:serviceaccount:{release_namespace}:{worker}"

    # Everything the launcher does, as the worker's account: no 403 on the way.
    api = as_account(real_cluster, token_for(real_cluster, release_namespace, worker))
    launcher = KubernetesLauncher(real_cluster.launcher(namespace).config, api_client=api)
    store = f"s3://gpujobs-k8s/{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket("gpujobs-k8s")
    handle = launcher.launch(request(trainer=trainer_spec(50), checkpoint_uri=store, s3_url=pod_s3))
    wait_state(real_cluster, launcher, handle, {ObservedState.RUNNING, ObservedState.SUCCEEDED},
               timeout=180)  # fmt: skip
    assert isinstance(log_of(launcher, handle), list)
    launcher.cancel(handle)
    name = handle.split("/")[1]
    real_cluster.wait(lambda: not real_cluster.pods(namespace, name), timeout=90,
                      what="the cancelled attempt's pods to be gone")  # fmt: skip

    def can(verb: str, resource: str, where: str | None = namespace) -> bool:
        resource, _, sub = resource.partition("/")
        args = ["auth", "can-i", verb, resource, "--as", who]
        args += ["--subresource", sub] if sub else []
        args += ["-n", where] if where else []
        return real_cluster.kubectl(*args, check=False).strip() == "yes"

    needed = [("create", "jobs.batch"), ("get", "jobs.batch"), ("patch", "jobs.batch"),
              ("list", "jobs.batch"),  # helm uninstall's hook deletes them all
              ("delete", "jobs.batch"), ("create", "secrets"), ("delete", "secrets"),
              ("patch", "secrets"), ("create", "services"), ("list", "pods"),
              ("get", "pods/log"), ("list", "events"),
              ("list", "workloads.kueue.x-k8s.io")]  # fmt: skip
    refused = [("get", "secrets"), ("list", "secrets"), ("create", "pods"), ("delete", "pods"),
               ("create", "pods/eviction"), ("create", "pods/exec"), ("update", "jobs.batch"),
               ("create", "roles.rbac.authorization.k8s.io"),
               ("create", "rolebindings.rbac.authorization.k8s.io"),
               ("create", "serviceaccounts/token"), ("delete", "namespaces")]  # fmt: skip
    assert [n for n in needed if not can(*n)] == []
    assert [r for r in refused if can(*r)] == []
    # Nothing outside the jobs namespace, nothing cluster-wide.
    assert not can("create", "jobs.batch", "default")
    assert not can("list", "pods", release_namespace)
    assert not can("list", "nodes", None)
    assert not can("list", "namespaces", None)

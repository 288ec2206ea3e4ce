"""The Helm chart installed for real on the local cluster, as an operator would: `helm install`
with the project's own images (imported into the node's containerd), the migration hook, the
control plane Ready, a team made with the admin command the docs give, a job submitted with the
CLI through the chart's Service, preempted by evicting its pod and resumed from S3 to the weights
of an uninterrupted run; `helm upgrade` with a changed value while a job runs (the job is not
lost and is billed once); `helm uninstall` leaving nothing of gpujobs behind but the database.

PostgreSQL, Redis and S3 are external, on this machine, as the chart's docs tell an operator to
run them (the chart installs none): the ones `make test` starts, reached by pods through relays
on the node's address. The tests run in order on one release.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text

from devstack.cluster import RealCluster, cluster_setting, import_images
from devstack.confinement import open_directory
from devstack.relay import Relay
from devstack.s3server import S3Server
from devstack.stack import DEFAULT_PG_ADMIN_URL, ROOT, Redis
from gpujobs.checkpoints import job_checkpoint_uri
from tests.k8s.test_real_launcher import (
    assert_same_weights,
    checkpoint_of,
    reference_weights,
    trainer_spec,
)

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(900)]

CHART = ROOT / "deploy" / "helm" / "gpujobs"
RELEASE = "gpujobs"
IMAGES = {"api": "gpujobs-api:dev", "worker": "gpujobs-worker:dev"}
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
MANAGED = "app.kubernetes.io/managed-by=gpujobs"


def helm(*args: str, check: bool = True) -> str:
    done = subprocess.run(
        [cluster_setting("BIN_DIR") + "/helm", *args], capture_output=True, text=True,
        env={**os.environ, "KUBECONFIG": cluster_setting("KUBECONFIG_ADMIN")},
    )  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


@dataclass
class Release:
    cluster: RealCluster
    namespace: str
    values: Path
    database_url: str
    checkpoint_root: str
    url: str = ""
    token: str = ""
    forward: PortForward | None = None

    def connect(self) -> None:
        """A port-forward to the API Service. `kubectl port-forward svc/...` holds one pod: once
        an upgrade has rolled it, a new one is needed (an operator's Ingress would follow)."""
        if self.forward is not None:
            self.forward.close()
        self.forward = PortForward(self)
        self.url = self.forward.url

    def kubectl(self, *args: str) -> str:
        return self.cluster.kubectl("-n", self.namespace, *args)

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def cli(self, *args: str) -> str:
        env = {**os.environ, "GPUJOBS_URL": self.url, "GPUJOBS_TOKEN": self.token}
        done = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "gpujobs"), *args],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"gpujobs {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def job(self, job_id: str) -> dict[str, Any]:
        with self.client() as client:
            found: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
            return found

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        with self.client() as client:
            rows: list[dict[str, Any]] = client.get(f"/v1/jobs/{job_id}/attempts").json()
            return rows

    def wait_ended(self, job_id: str, *, timeout: float) -> dict[str, Any]:
        def ended() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None

        found: dict[str, Any] = self.cluster.wait(ended, timeout=timeout, what=f"{job_id} to end")
        return found

    def trainer_pod(self, job_id: str) -> str:
        def running() -> str | None:
            pods = self.cluster.core.list_namespaced_pod(
                self.namespace, label_selector=f"gpujobs.dev/job-id={job_id}"
            ).items
            live = [
                p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            ]
            return live[0].metadata.name if live else None

        name: str = self.cluster.wait(running, timeout=300, what=f"{job_id}'s trainer pod")
        return name

    def wait_trained(self, job_id: str) -> None:
        self.cluster.wait(
            lambda: (self.job(job_id).get("progress") or {}).get("step"),
            timeout=300,
            what=f"{job_id}'s first progress report",
        )


class PortForward:
    """`kubectl port-forward` to the chart's API Service, on a free local port."""

    def __init__(self, release: Release) -> None:
        kubectl = cluster_setting("BIN_DIR") + "/kubectl"
        command = [
            kubectl, "--kubeconfig", str(release.cluster.kubeconfig), "-n", release.namespace,
            "port-forward", f"svc/{RELEASE}-api", ":8000",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert found, line
        self.url = f"http://127.0.0.1:{found.group(1)}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def _values(
    *, database_url: str, redis_url: str, s3: S3Server, pod_s3: str, bucket: str, prefix: str
) -> dict[str, Any]:
    small = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
    return {
        "image": {
            "api": {"repository": IMAGES["api"].split(":")[0], "tag": "dev"},
            "worker": {"repository": IMAGES["worker"].split(":")[0], "tag": "dev"},
            "pullPolicy": "IfNotPresent",
        },
        "database": {"url": database_url},
        "redis": {"url": redis_url},
        "s3": {
            "checkpointUri": f"s3://{bucket}/{prefix}",
            "endpointUrl": pod_s3,
            "accessKeyId": s3.access_key,
            "secretAccessKey": s3.secret_key,
        },
        "jobs": {
            "capacityProfile": "custom",
            "capacityTypeLabel": "gpujobs.dev/local-capacity",
            "capacityTypeValues": {"spot": "any", "on_demand": "any", "reserved": "any"},
            "instanceTypeLabel": "",
            "terminationGraceSeconds": 30,
        },
        "trainer": {
            "image": {"repository": "gpujobs-trainer", "tag": "cpu"},
            "resources": {"cpuPerGpu": 0.1, "memoryGiBPerGpu": 1},
            "shmSizeGiB": 0.25,
            "s3": {"accessKeyId": s3.access_key, "secretAccessKey": s3.secret_key},
        },
        # Two cores: one of each, small requests.
        "api": {
            "replicas": 1,
            "autoscaling": {"enabled": False},
            "podDisruptionBudget": {"enabled": False},
            "resources": small,
        },
        "worker": {"replicas": 1, "concurrency": 2, "resources": small},
        "beat": {"resources": small},
        "extraSettings": {"schedule_interval_s": 1, "reconcile_interval_s": 1},
    }


@pytest.fixture(scope="module")
def release(real_cluster: RealCluster, s3_server: S3Server, pod_s3: str) -> Iterator[Release]:
    import_images(*IMAGES.values())
    namespace = real_cluster.namespace()
    tmp = open_directory()
    database = f"gpujobs_helm_{uuid.uuid4().hex[:8]}"
    admin = create_engine(DEFAULT_PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{database}"'))
    redis = Redis(tmp)
    redis.start()
    node = real_cluster.node_ip
    pg_port = int(DEFAULT_PG_ADMIN_URL.rsplit(":", 1)[1].split("/")[0])
    relays = [Relay(node, pg_port), Relay(node, redis.port)]
    bucket = "gpujobs-helm"
    s3_server.create_bucket(bucket)
    values = _values(
        database_url=f"postgresql+psycopg://postgres@{node}:{pg_port}/{database}",
        redis_url=f"redis://{node}:{redis.port}/0",
        s3=s3_server, pod_s3=pod_s3, bucket=bucket, prefix=namespace,
    )  # fmt: skip
    values_file = tmp / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    local_url = DEFAULT_PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database
    checkpoint_root = values["s3"]["checkpointUri"]
    found = Release(real_cluster, namespace, values_file, local_url, checkpoint_root)
    try:
        helm("install", RELEASE, str(CHART), "-n", namespace, "-f", str(values_file),
             "--wait", "--timeout", "10m")  # fmt: skip
        found.connect()
        yield found
    finally:
        if found.forward is not None:
            found.forward.close()
        helm("uninstall", RELEASE, "-n", namespace, "--wait", check=False)
        real_cluster.delete_namespace(namespace)
        for relay in relays:
            relay.close()
        redis.stop()
        admin.dispose()


def test_install_runs_the_migration_hook_and_the_control_plane_becomes_ready(
    release: Release,
) -> None:
    engine = create_engine(release.database_url)
    try:
        with engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()
    assert version, "the migration hook did not run"
    for component in ("api", "worker", "beat"):
        deployment = release.cluster.kubectl(
            "-n", release.namespace, "get", "deployment", f"{RELEASE}-{component}", "-o", "json"
        )
        status = json.loads(deployment)["status"]
        assert status.get("readyReplicas", 0) >= 1, (component, status)
    assert httpx.get(f"{release.url}/readyz", timeout=10).status_code == 200


def test_a_job_through_the_chart_is_preempted_by_an_eviction_and_resumes_to_the_same_weights(
    release: Release, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first team, with the admin command the docs and the install notes give.
    release.token = (
        release.kubectl(
            "exec",
            f"deploy/{RELEASE}-api",
            "--",
            "python",
            "-m",
            "api.admin",
            "create-team",
            "acme",
        )
        .strip()
        .splitlines()[-1]
    )
    steps = 1500
    spec = {
        "name": "helm-evicted",
        "trainer": trainer_spec(steps),
        "capacity": {"types": ["spot", "on_demand"]},
        "env": {"OMP_NUM_THREADS": "1"},
    }
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    submitted = release.cli("submit", str(spec_file), "-y", "--json")
    job_id = json.loads(submitted)["id"]
    pod = release.trainer_pod(job_id)
    release.wait_trained(job_id)
    release.cluster.evict(release.namespace, pod)
    job = release.wait_ended(job_id, timeout=600)
    attempts = release.attempts(job_id)
    assert job["status"] == "SUCCEEDED", (job, attempts)
    assert [a["end_reason"] for a in attempts] == ["preempted", "succeeded"], attempts
    assert job["preemptions"] == 1 and job["restarts"] == 0, job
    assert (attempts[1]["resume_from_step"] or 0) > 0, attempts
    ours = checkpoint_of(
        s3_server, job_checkpoint_uri(release.checkpoint_root, job_id), monkeypatch
    )
    assert_same_weights(ours, reference_weights(trainer_spec(steps), tmp_path))
    # The weights download with the CLI, checked against the manifest.
    release.cli("download", job_id, "-o", str(tmp_path / "weights"))
    assert any((tmp_path / "weights").rglob("*")), "nothing downloaded"


def test_an_upgrade_while_a_job_runs_loses_nothing_and_bills_once(
    release: Release, tmp_path: Path
) -> None:
    assert release.token, "runs after the job test, which made the team"
    spec = {
        "name": "helm-upgrade",
        "trainer": trainer_spec(2500),
        "capacity": {"types": ["on_demand"]},
        "env": {"OMP_NUM_THREADS": "1"},
    }
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    job_id = json.loads(release.cli("submit", str(spec_file), "-y", "--json"))["id"]
    release.trainer_pod(job_id)
    release.wait_trained(job_id)
    before = {
        d: json.loads(release.kubectl("get", "deployment", f"{RELEASE}-{d}", "-o", "json"))
        for d in ("api", "worker", "beat")
    }
    # A changed value: the control plane's pods roll (the ConfigMap's checksum is on them).
    helm("upgrade", RELEASE, str(CHART), "-n", release.namespace, "-f", str(release.values),
         "--set", "extraSettings.schedule_interval_s=2", "--wait", "--timeout", "10m")  # fmt: skip
    for name, deployment in before.items():
        after = json.loads(release.kubectl("get", "deployment", f"{RELEASE}-{name}", "-o", "json"))
        assert after["metadata"]["generation"] > deployment["metadata"]["generation"], name
    release.connect()  # the API pod the port-forward held was replaced
    job = release.wait_ended(job_id, timeout=600)
    attempts = release.attempts(job_id)
    assert job["status"] == "SUCCEEDED", (job, attempts)
    assert len(attempts) == 1 and attempts[0]["end_reason"] == "succeeded", attempts
    with release.client() as client:
        usage = client.get("/v1/usage", params={"group_by": "job"}).json()
    (billed,) = [group for group in usage["groups"] if group["key"] == job_id]
    cost = attempts[0]["cost"]
    assert cost and cost > 0, attempts
    # One attempt, billed once: the usage ledger holds its cost once, not again after the roll.
    assert billed["attempts"] == 1, billed
    assert abs(billed["cost_microusd"] / 1e6 - cost) < 1e-6, (billed, attempts)


def test_uninstall_leaves_no_job_pod_or_secret_of_gpujobs(release: Release) -> None:
    helm("uninstall", RELEASE, "-n", release.namespace, "--wait", "--timeout", "5m")

    def left() -> list[str]:
        found = []
        for kind in ("jobs", "pods", "secrets", "deployments", "configmaps", "services"):
            for selector in (INSTANCE, MANAGED):
                names = release.kubectl("get", kind, "-l", selector, "-o", "name").split()
                found += names
        return found

    deadline = time.monotonic() + 120
    while left() and time.monotonic() < deadline:
        time.sleep(1)
    assert not left(), left()
    # What the chart keeps: the database (its rows stay, for the next install).
    engine = create_engine(release.database_url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM jobs")).scalar()
    finally:
        engine.dispose()

"""Storage credentials per attempt on the real cluster (issue 36): the whole service with
GPUJOBS_LAUNCHER=kubernetes and GPUJOBS_STORAGE_CREDENTIALS=iam_users (the devstack's setting)
against the session's SeaweedFS. The keys in a running attempt's own Secret (what its pod reads)
are not the server's, reach its job's prefix, are refused on another team's job's checkpoints and
on the bucket's listing, and stop working once the attempt has ended (cancelled).
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devstack.cluster import RealCluster
from devstack.s3server import S3Server
from devstack.stack import ROOT, Stack
from gpujobs.checkpoints import S3Location, parse_uri
from tests.k8s.test_real_launcher import trainer_spec
from tests.k8s.test_real_service import wait_for_pod
from worker.launchers.kubernetes.manifests import (
    ATTEMPT_ID_LABEL,
    S3_ACCESS_KEY_ID_KEY,
    S3_SECRET_ACCESS_KEY_KEY,
    label_value,
)

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]


def secret_keys(cluster: RealCluster, namespace: str, attempt_id: str) -> tuple[str, str]:
    """The S3 keys in the attempt's own Secret, as the launcher created it in the cluster."""
    selector = f"{ATTEMPT_ID_LABEL}={label_value(attempt_id)}"
    (secret,) = cluster.core.list_namespaced_secret(namespace, label_selector=selector).items
    data = {key: base64.b64decode(value).decode() for key, value in secret.data.items()}
    return data[S3_ACCESS_KEY_ID_KEY], data[S3_SECRET_ACCESS_KEY_KEY]


def code_of(call: Callable[[], Any]) -> str:
    try:
        call()
    except ClientError as error:
        return str(error.response.get("Error", {}).get("Code", ""))
    return "ok"


def test_an_attempts_secret_holds_keys_for_its_own_prefix_only_until_it_ends(
    k8s_stack: Stack,
    real_cluster: RealCluster,
    namespace: str,
    s3_server: S3Server,
) -> None:
    victim = k8s_stack.submit(
        {"name": "k8s-victim", "trainer": trainer_spec(200), "capacity": {"types": ["on_demand"]}}
    )
    done = k8s_stack.wait_status(victim, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=400)
    assert done["status"] == "SUCCEEDED", k8s_stack.diagnostics(victim)
    victim_at = parse_uri(k8s_stack.checkpoint_uri(victim))
    assert isinstance(victim_at, S3Location)
    admin = s3_server.client()
    victim_keys = [
        o["Key"]
        for o in admin.list_objects_v2(Bucket=victim_at.bucket, Prefix=f"{victim_at.prefix}/")[
            "Contents"
        ]
    ]

    k8s_stack.token = subprocess.run(
        [sys.executable, "-m", "api.admin", "create-team", "k8s-thief"],
        cwd=ROOT, env=k8s_stack.env(), check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    thief = k8s_stack.submit(
        {
            "name": "k8s-thief",
            "trainer": trainer_spec(100_000),
            "capacity": {"types": ["on_demand"]},
        }
    )
    wait_for_pod(real_cluster, namespace)
    (attempt,) = k8s_stack.attempts(thief)
    keys = secret_keys(real_cluster, namespace, attempt["id"])
    thief_at = parse_uri(k8s_stack.checkpoint_uri(thief))
    assert isinstance(thief_at, S3Location)
    s3 = s3_server.client_as(keys)
    bucket = victim_at.bucket

    assert keys[0] != s3_server.access_key, "never the server's own keys"
    own = f"{thief_at.prefix}/"
    assert code_of(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=own)) == "ok"
    assert code_of(lambda: s3.put_object(Bucket=bucket, Key=f"{own}probe", Body=b"x")) == "ok"
    attacks = {
        "read": lambda: s3.get_object(Bucket=bucket, Key=victim_keys[0]),
        "overwrite": lambda: s3.put_object(Bucket=bucket, Key=victim_keys[0], Body=b"x"),
        "delete": lambda: s3.delete_object(Bucket=bucket, Key=victim_keys[0]),
        "list victim": lambda: s3.list_objects_v2(Bucket=bucket, Prefix=f"{victim_at.prefix}/"),
        "list bucket": lambda: s3.list_objects_v2(Bucket=bucket),
    }
    outcomes = {name: code_of(call) for name, call in attacks.items()}
    assert set(outcomes.values()) == {"AccessDenied"}, outcomes
    assert [
        o["Key"]
        for o in admin.list_objects_v2(Bucket=bucket, Prefix=f"{victim_at.prefix}/")["Contents"]
    ] == victim_keys

    with k8s_stack.client() as client:
        assert client.post(f"/v1/jobs/{thief}/cancel").status_code == 200

    def revoked() -> bool:
        return code_of(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=own)) == (
            "InvalidAccessKeyId"
        )

    real_cluster.wait(revoked, timeout=120, what="the cancelled attempt's keys to be revoked")

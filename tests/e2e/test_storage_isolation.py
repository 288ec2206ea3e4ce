"""A team's trainer reaches its own job's checkpoints and no other's (issue 36), against the
devstack: the API, a Celery worker with the local launcher, SeaweedFS, and per-attempt keys
(GPUJOBS_STORAGE_CREDENTIALS=iam_users). Team `thief` runs a workload allowed to it
(tests/worker/hostile_storage.py) that attacks the checkpoints of team e2e's finished job with
the keys its trainer was given; the keys stop working once its attempt has ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devstack.stack import ROOT, Stack, wait_for
from gpujobs.checkpoints import S3Location, parse_uri
from tests.e2e.test_preemption_recovery import trainer_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

THIEF = "thief"
REFUSED = {"AccessDenied", "403"}


def _report(stack: Stack) -> dict[str, Any]:
    for log in (stack.home / "attempts").glob("*/trainer.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("STORAGE-REPORT "):
                found: dict[str, Any] = json.loads(line.removeprefix("STORAGE-REPORT "))
                return found
    raise AssertionError("no STORAGE-REPORT in any trainer log")


def test_a_teams_trainer_keys_reach_no_other_jobs_checkpoints(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = make_stack(
        trace=[1],
        tick_seconds=60,
        extra_env={"GPUJOBS_TEAM_WORKLOAD_MODULE_PREFIXES": json.dumps({THIEF: ["tests.worker"]})},
    )
    victim = stack.submit(
        {
            "name": "victim",
            "trainer": trainer_spec(steps=20),
            "capacity": {"types": ["on_demand"]},
            "estimated_hours": 0.02,
        }
    )
    assert stack.wait_status(victim, {"SUCCEEDED"}, timeout=180)["status"] == "SUCCEEDED"
    location = parse_uri(stack.checkpoint_uri(victim))
    assert isinstance(location, S3Location)
    admin = stack.s3.client()
    listed = admin.list_objects_v2(Bucket=location.bucket, Prefix=f"{location.prefix}/")
    manifests = [o["Key"] for o in listed["Contents"] if o["Key"].endswith("manifest.json")]
    weights = admin.get_object(Bucket=location.bucket, Key=manifests[-1])["Body"].read()

    thief_token = subprocess.run(
        [sys.executable, "-m", "api.admin", "create-team", THIEF],
        cwd=ROOT, env=stack.env(), check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    stack.token = thief_token
    thief = stack.submit(
        {
            "name": "thief",
            "trainer": {
                "workload": "tests.worker.hostile_storage:build",
                "steps": 1,
                "dataloader": {"num_workers": 0},
            },
            "capacity": {"types": ["on_demand"]},
            "env": {
                "HOSTILE_VICTIM_URI": stack.checkpoint_uri(victim),
                "HOSTILE_VICTIM_KEY": manifests[-1],
            },
        }
    )
    stack.wait_status(thief, {"FAILED", "SUCCEEDED"}, timeout=180)
    report = _report(stack)
    outcomes = report["outcomes"]

    assert report["access_key_id"] != stack.s3.access_key, "never the server's own keys"
    for attack in (
        "read victim",
        "overwrite victim",
        "delete victim",
        "list victim",
        "list bucket",
    ):
        assert outcomes[attack] in REFUSED, (attack, outcomes)
    for own in ("write own", "read own", "list own"):
        assert outcomes[own] == "ok", (own, outcomes)
    assert admin.get_object(Bucket=location.bucket, Key=manifests[-1])["Body"].read() == weights

    # The attempt has ended: within a reconciling pass its keys stop working.
    stolen = boto3.client(
        "s3",
        endpoint_url=stack.s3.endpoint_url,
        aws_access_key_id=report["access_key_id"],
        aws_secret_access_key=report["secret_access_key"],
        region_name=stack.s3.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )

    def revoked() -> bool:
        try:
            stolen.list_objects_v2(Bucket=location.bucket, Prefix=f"{report['own_prefix']}/")
        except ClientError as error:
            return error.response.get("Error", {}).get("Code") == "InvalidAccessKeyId"
        return False

    wait_for(revoked, timeout=30, what="the ended attempt's keys to be revoked")

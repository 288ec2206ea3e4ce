"""Storage credentials per attempt, against a real SeaweedFS (its embedded IAM API).

The deployment is configured as compose and the devstack were before: the launcher's static
trainer keys are the S3 server's own. With GPUJOBS_STORAGE_CREDENTIALS=iam_users each attempt's
pod Secret holds keys minted for it instead (read from the Secret the Kubernetes launcher
builds, so what a trainer really gets), and with team B's keys the attack on team A's job's
checkpoints is refused, while B's own prefix works through the trainer's own store; B's keys
stop working once its attempt has ended.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings
from devstack.s3server import S3Server
from gpujobs.checkpoints import S3Location, parse_uri
from tests.worker.support import (
    Clock,
    RecordingLauncher,
    control_plane,
    job,
    principal,
    submit,
)
from trainer.checkpoint.store import S3Store
from worker.launchers.base import LaunchRequest, ObservedState
from worker.launchers.kubernetes.config import KubernetesLauncherConfig
from worker.launchers.kubernetes.manifests import (
    S3_ACCESS_KEY_ID_KEY,
    S3_SECRET_ACCESS_KEY_KEY,
    build_manifests,
)
from worker.reconciler import reconcile_once
from worker.scheduler import schedule_once
from worker.storage_credentials.iam_users import IamUsers
from worker.storage_credentials.left_uploads import Lifetime, dead_before, left_behind
from worker.storage_credentials.policy import prefix_policy
from worker.storage_credentials.revocation import sweep_due, to_revoke

BUCKET = "gpujobs-storage-credentials"
REFUSED = {"AccessDenied", "403", "Forbidden"}


def keys_handed_to(request: LaunchRequest, settings: Settings) -> tuple[str, str]:
    """The S3 keys in the attempt's own Secret, as the Kubernetes launcher writes it."""
    secret = build_manifests(request, KubernetesLauncherConfig.from_settings(settings)).secret
    data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
    return data[S3_ACCESS_KEY_ID_KEY], data[S3_SECRET_ACCESS_KEY_KEY]


def refused(call: Callable[[], Any], codes: set[str] = REFUSED) -> str:
    with pytest.raises(ClientError) as raised:
        call()
    code = str(raised.value.response.get("Error", {}).get("Code", ""))
    assert code in codes, raised.value
    return code


@pytest.fixture
def deployment(
    settings: Settings, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """Settings as the compose file had them (trainer keys = the server's own), plus the
    per-attempt mode; the control plane's own keys in its environment, as in every deployment."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    s3_server.create_bucket(BUCKET)
    settings.checkpoint_uri = f"s3://{BUCKET}/checkpoints-{uuid.uuid4().hex[:8]}"
    settings.s3_endpoint_url = s3_server.endpoint_url
    settings.kubernetes.k8s_trainer_s3_access_key_id = s3_server.access_key
    settings.kubernetes.k8s_trainer_s3_secret_access_key = s3_server.secret_key
    settings.storage_credentials = "iam_users"
    return settings


def test_team_bs_trainer_keys_reach_its_own_jobs_prefix_and_never_team_as(
    deployment: Settings, session_factory: sessionmaker[Session], s3_server: S3Server
) -> None:
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(deployment, session_factory, launcher, clock)
    job_a = submit(session_factory, principal(session_factory, "team-a"))
    job_b = submit(session_factory, principal(session_factory, "team-b"))
    schedule_once(cp)
    launched = {request.job_id: request for request in launcher.launches}
    a_keys = keys_handed_to(launched[job_a], deployment)
    b_keys = keys_handed_to(launched[job_b], deployment)
    assert s3_server.access_key not in (a_keys[0], b_keys[0]), "never the server's own keys"
    assert a_keys[0] != b_keys[0]
    a_at = parse_uri(job(session_factory, job_a).checkpoint_uri or "")
    b_at = parse_uri(job(session_factory, job_b).checkpoint_uri or "")
    assert isinstance(a_at, S3Location) and isinstance(b_at, S3Location)
    a_manifest = f"{a_at.prefix}/step-000000000010/manifest.json"
    # Team A's trainer checkpoints with its own keys.
    a_s3, b_s3 = s3_server.client_as(a_keys), s3_server.client_as(b_keys)
    a_s3.put_object(Bucket=BUCKET, Key=a_manifest, Body=b"team A's weights")

    # The attack, with the keys handed to team B's trainer: read, overwrite, delete, copy and
    # list team A's checkpoints, list the whole bucket, reach a prefix that merely starts like
    # B's own, and mint itself keys through the IAM API.
    refused(lambda: b_s3.get_object(Bucket=BUCKET, Key=a_manifest))
    refused(lambda: b_s3.head_object(Bucket=BUCKET, Key=a_manifest))
    refused(lambda: b_s3.put_object(Bucket=BUCKET, Key=a_manifest, Body=b"B's weights"))
    refused(lambda: b_s3.delete_object(Bucket=BUCKET, Key=a_manifest))
    b_s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": a_manifest}]})
    refused(
        lambda: b_s3.copy_object(
            Bucket=BUCKET, Key=f"{b_at.prefix}/stolen", CopySource=f"{BUCKET}/{a_manifest}"
        )
    )
    refused(lambda: b_s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{a_at.prefix}/"))
    refused(lambda: b_s3.list_objects_v2(Bucket=BUCKET, Prefix=a_at.prefix))
    refused(lambda: b_s3.list_objects_v2(Bucket=BUCKET))
    refused(lambda: b_s3.list_objects_v2(Bucket=BUCKET, Prefix=b_at.prefix.rsplit("/", 1)[0]))
    refused(lambda: b_s3.put_object(Bucket=BUCKET, Key=f"{b_at.prefix}x/model.pt", Body=b"x"))
    with pytest.raises(ClientError):
        boto3.client(
            "iam",
            endpoint_url=s3_server.endpoint_url,
            aws_access_key_id=b_keys[0],
            aws_secret_access_key=b_keys[1],
            region_name=s3_server.region,
        ).create_user(UserName="b-escalates")
    admin = s3_server.client()
    assert admin.get_object(Bucket=BUCKET, Key=a_manifest)["Body"].read() == b"team A's weights"

    # B's own prefix works through the trainer's own store: small and multipart uploads,
    # listing, reading, deleting, and the bucket check its keys may not make.
    store = S3Store(BUCKET, b_at.prefix, b_s3)
    store.ensure_bucket()
    shard = bytes(range(256)) * (33 * 1024 * 4)  # 33 MiB: a multipart upload
    store.put("step-000000000005/model.pt", shard)
    store.put("step-000000000005/manifest.json", b"{}")
    assert store.list() == ["step-000000000005/manifest.json", "step-000000000005/model.pt"]
    assert store.get("step-000000000005/model.pt") == shard
    store.delete(["step-000000000005/model.pt"])
    assert store.list("step-") == ["step-000000000005/manifest.json"]

    # B's attempt ends: its keys stop working on the next reconciling pass; A's still work.
    launcher.script(launched[job_b].attempt_id, ObservedState.SUCCEEDED, exit_code=0)
    reconcile_once(cp)
    refused(
        lambda: b_s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{b_at.prefix}/"),
        {"InvalidAccessKeyId", "AccessDenied", "403"},
    )
    refused(
        lambda: b_s3.get_object(
            Bucket=BUCKET, Key=f"{b_at.prefix}/step-000000000005/manifest.json"
        ),
        {"InvalidAccessKeyId", "AccessDenied", "403"},
    )
    assert a_s3.get_object(Bucket=BUCKET, Key=a_manifest)["Body"].read() == b"team A's weights"
    assert (
        launched[job_b].attempt_id
        not in IamUsers(
            iam_endpoint_url=s3_server.endpoint_url, s3_endpoint_url=s3_server.endpoint_url
        ).issued()
    )


def test_the_uploads_an_ended_attempt_left_unfinished_are_aborted_and_no_other_jobs(
    deployment: Settings, session_factory: sessionmaker[Session], s3_server: S3Server
) -> None:
    """A trainer killed mid-upload leaves its multipart upload's parts in the store. Its keys may
    not list uploads (SeaweedFS's IAM refuses the action in a policy), so the trainer's own
    cleanup at the next start was refused and they piled up."""
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(deployment, session_factory, launcher, clock)
    job_a = submit(session_factory, principal(session_factory, "team-a"))
    job_b = submit(session_factory, principal(session_factory, "team-b"))
    schedule_once(cp)
    launched = {request.job_id: request for request in launcher.launches}
    started: dict[str, str] = {}
    for job_id in (job_a, job_b):
        at = parse_uri(job(session_factory, job_id).checkpoint_uri or "")
        assert isinstance(at, S3Location)
        s3 = s3_server.client_as(keys_handed_to(launched[job_id], deployment))
        key = f"{at.prefix}/step-000000000010/model.pt"
        upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 4096)
        started[job_id] = f"{at.prefix}/"
        if job_id == job_b:  # what its trainer's next start would do, refused
            store = S3Store(BUCKET, at.prefix, s3)
            assert refused(store.abort_incomplete)

    def unfinished(job_id: str) -> list[str]:
        page = s3_server.client().list_multipart_uploads(Bucket=BUCKET, Prefix=started[job_id])
        return [upload["Key"] for upload in page.get("Uploads", [])]

    assert unfinished(job_b) == [f"{started[job_b]}step-000000000010/model.pt"]
    clock.advance(5)  # the trainer is killed after its upload began
    launcher.script(launched[job_b].attempt_id, ObservedState.FAILED, exit_code=-9)
    reconcile_once(cp)

    assert unfinished(job_b) == []
    assert unfinished(job_a) == [f"{started[job_a]}step-000000000010/model.pt"]
    assert (
        launched[job_b].attempt_id
        not in IamUsers(
            iam_endpoint_url=s3_server.endpoint_url, s3_endpoint_url=s3_server.endpoint_url
        ).issued()
    )


def test_only_uploads_begun_by_the_attempts_end_are_its_own() -> None:
    """Its job's next attempt may be uploading under the same prefix when the sweep runs."""
    ended = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    uploads = [
        {"Key": "j/step-1/model.pt", "UploadId": "before", "Initiated": ended - timedelta(hours=1)},
        {"Key": "j/step-1/optim.pt", "UploadId": "that second", "Initiated": ended},
        {
            "Key": "j/step-2/model.pt",
            "UploadId": "next attempt",
            "Initiated": ended + timedelta(seconds=1),
        },
    ]
    assert left_behind(uploads, ended_at=ended) == [
        ("j/step-1/model.pt", "before"),
        ("j/step-1/optim.pt", "that second"),
    ]


def test_a_standby_that_ends_beside_its_primary_takes_none_of_the_primarys_uploads() -> None:
    """A standby withdrawn or lost while its primary trains ends with the primary's checkpoint
    upload in flight under the same prefix: nothing begun after the primary was created is a
    dead attempt's. An attempt that ended before this one began, or one created after it
    ended, does not move the cutoff."""
    t0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    minute = timedelta(minutes=1)
    primary = Lifetime(t0, None)
    standby = Lifetime(t0 + 5 * minute, t0 + 9 * minute)
    assert dead_before(standby, [primary]) == t0
    uploads = [{"Key": "j/step-9/model.pt", "UploadId": "primary's", "Initiated": t0 + 8 * minute}]
    assert left_behind(uploads, ended_at=dead_before(standby, [primary])) == []

    earlier = Lifetime(t0 - 9 * minute, t0 - minute)  # ended before the primary was created
    later = Lifetime(t0 + 10 * minute, None)  # the next attempt, created after it ended
    primary_ended = Lifetime(t0, t0 + 9 * minute)
    assert dead_before(primary_ended, [earlier, later]) == t0 + 9 * minute
    # A handover: the standby that takes over was created while the primary still ran.
    taking_over = Lifetime(t0 + 7 * minute, None)
    assert dead_before(primary_ended, [earlier, taking_over, later]) == t0 + 7 * minute


def iam_users(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> IamUsers:
    """The control plane's minter on the live store (its keys in the environment, the bucket)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    s3_server.create_bucket(BUCKET)
    return IamUsers(iam_endpoint_url=s3_server.endpoint_url, s3_endpoint_url=s3_server.endpoint_url)


def test_a_store_that_refuses_the_uploads_listing_still_loses_the_attempts_user(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A control plane whose role may not list or abort uploads (an upgrade that did not add
    the rights) must still revoke: a user kept would be listed by every later sweep, and the
    users would pile up to the account's limit."""
    users = iam_users(s3_server, monkeypatch)
    attempt, uri = str(uuid.uuid4()), f"s3://{BUCKET}/refused/{uuid.uuid4()}"
    assert users.issue(attempt_id=attempt, checkpoint_uri=uri) is not None

    def refuse(*_: object, **__: object) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied"}}, "ListMultipartUploads")

    monkeypatch.setattr(users.s3, "get_paginator", refuse)
    users.revoke(attempt_id=attempt, checkpoint_uri=uri, ended_at=datetime.now(UTC))
    assert attempt not in users.issued()


def test_a_relaunched_attempt_keeps_its_first_keys_until_it_ends(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launch retried after a crash may find the first trainer running with the first keys."""
    users = iam_users(s3_server, monkeypatch)
    attempt, uri = str(uuid.uuid4()), f"s3://{BUCKET}/relaunch/{uuid.uuid4()}"
    prefix = uri.split("/", 3)[3]
    first = users.issue(attempt_id=attempt, checkpoint_uri=uri)
    second = users.issue(attempt_id=attempt, checkpoint_uri=uri)
    assert first is not None and second is not None
    for keys in (first, second):
        s3 = s3_server.client_as((keys.access_key_id, keys.secret_access_key))
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/k", Body=b"ok")
    assert attempt in users.issued()

    users.revoke(attempt_id=attempt)
    users.revoke(attempt_id=attempt)  # idempotent

    assert attempt not in users.issued()
    for keys in (first, second):
        revoked = s3_server.client_as((keys.access_key_id, keys.secret_access_key))
        refused(
            partial(revoked.put_object, Bucket=BUCKET, Key=f"{prefix}/k", Body=b"x"),
            {"InvalidAccessKeyId", "AccessDenied", "403"},
        )


def test_a_checkpoint_root_on_disk_needs_no_keys(s3_server: S3Server, tmp_path: Any) -> None:
    users = IamUsers(
        iam_endpoint_url=s3_server.endpoint_url, s3_endpoint_url=s3_server.endpoint_url
    )
    assert users.issue(attempt_id="a", checkpoint_uri=str(tmp_path / "job")) is None


def test_the_policy_names_only_the_jobs_prefix() -> None:
    policy = prefix_policy(bucket="b", prefix="/checkpoints/job-1/")
    objects, listing = policy["Statement"]
    assert objects["Resource"] == "arn:aws:s3:::b/checkpoints/job-1/*"
    assert listing["Resource"] == "arn:aws:s3:::b"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": "checkpoints/job-1/*"}}
    with pytest.raises(ValueError):
        prefix_policy(bucket="b", prefix="/")


def test_only_keys_of_attempts_no_longer_open_are_revoked() -> None:
    assert to_revoke(issued=["ended", "open", "gone"], open_attempts={"open"}) == ["ended", "gone"]


def test_a_pass_lists_the_users_only_after_an_attempt_ended_or_once_an_interval_passed(
    deployment: Settings, session_factory: sessionmaker[Session], s3_server: S3Server
) -> None:
    """ListUsers lists every user of the store (pages of them, on AWS against an account-wide
    rate limit): it was called by every reconciling pass, every two seconds."""
    deployment.storage_revoke_interval_s = 300.0
    launcher, clock = RecordingLauncher(), Clock()
    cp = control_plane(deployment, session_factory, launcher, clock)
    assert isinstance(cp.storage, IamUsers)
    listings: list[datetime] = []
    cp.storage.iam.meta.events.register(
        "before-call.iam.ListUsers", lambda **_: listings.append(clock())
    )
    holders = IamUsers(  # the test's own look at the store, not counted
        iam_endpoint_url=s3_server.endpoint_url, s3_endpoint_url=s3_server.endpoint_url
    )
    submit(session_factory, principal(session_factory, "team-a"))
    submit(session_factory, principal(session_factory, "team-b"))
    schedule_once(cp)
    first, second = (request.attempt_id for request in launcher.launches)
    for attempt_id in (first, second):
        launcher.script(attempt_id, ObservedState.RUNNING)

    reconcile_once(cp)
    assert listings == [clock()]  # its first pass: a worker that died may have left keys

    clock.advance(60)
    reconcile_once(cp)
    clock.advance(60)
    reconcile_once(cp)
    assert len(listings) == 1  # nothing ended: nothing to revoke, nothing listed

    launcher.script(second, ObservedState.SUCCEEDED, exit_code=0)
    clock.advance(1)
    reconcile_once(cp)  # the pass that closes it revokes its keys
    assert len(listings) == 2
    assert {first, second} & set(holders.issued()) == {first}

    clock.advance(60)
    reconcile_once(cp)
    assert len(listings) == 2
    clock.advance(300)
    reconcile_once(cp)
    assert listings[-1] == clock() and len(listings) == 3  # the interval's own sweep


def test_a_sweep_is_due_at_first_after_an_end_or_a_failure_and_else_each_interval() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    due = partial(sweep_due, interval_s=300.0)
    later = t0 + timedelta(seconds=299)
    assert due(last=None, failed=False, ended_since=False, now=t0)
    assert not due(last=t0, failed=False, ended_since=False, now=later)
    assert due(last=t0, failed=False, ended_since=True, now=later)
    assert due(last=t0, failed=True, ended_since=False, now=later)
    assert due(last=t0, failed=False, ended_since=False, now=t0 + timedelta(seconds=300))

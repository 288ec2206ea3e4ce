"""An IAM user per attempt, through the IAM API: SeaweedFS's embedded one (the S3 port, with
`-s3.iam.readOnly=false`), or any store that speaks AWS IAM's CreateUser, PutUserPolicy and
CreateAccessKey.

The control plane calls it with its own keys (the environment's, as boto3 finds them); the
trainer gets only the new user's keys. The user's name carries the attempt id, so the users
alive are the attempts holding keys, and a reconciling pass deletes those whose attempt has
ended (revocation.py), even when the worker that minted them died in between, after aborting
the multipart uploads the attempt left unfinished, which its own keys may not list
(left_uploads.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpujobs.checkpoints import S3Location, parse_uri
from worker.storage_credentials import S3Credentials
from worker.storage_credentials.left_uploads import abort_left_uploads
from worker.storage_credentials.policy import policy_document

log = logging.getLogger(__name__)

USER_PREFIX = "gpujobs-attempt-"
POLICY_NAME = "gpujobs-checkpoint-prefix"
# AWS IAM is eventually consistent (a new key works after seconds); SeaweedFS's at once.
READY_TIMEOUT_S = 30.0
# Errors while a new key is not yet known everywhere the S3 API answers.
NOT_YET = frozenset({"InvalidAccessKeyId", "AccessDenied", "SignatureDoesNotMatch"})


def user_name(attempt_id: str) -> str:
    return f"{USER_PREFIX}{attempt_id}"


def attempt_of(user: str) -> str | None:
    return user.removeprefix(USER_PREFIX) if user.startswith(USER_PREFIX) else None


def _code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


class IamUsers:
    """StorageCredentials by IAM users, one per attempt."""

    def __init__(
        self,
        *,
        iam_endpoint_url: str | None,
        s3_endpoint_url: str | None,
        region: str = "",
        ready_timeout_s: float = READY_TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.iam_endpoint_url = iam_endpoint_url or None
        self.s3_endpoint_url = s3_endpoint_url or None
        self.region = region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.ready_timeout_s = ready_timeout_s
        self.sleep = sleep
        self._iam: Any = None
        self._s3: Any = None

    @property
    def s3(self) -> Any:
        """The control plane's own S3 client (its keys, as boto3 finds them)."""
        if self._s3 is None:
            import boto3
            from botocore.config import Config

            self._s3 = boto3.client(
                "s3",
                endpoint_url=self.s3_endpoint_url,
                region_name=self.region,
                config=Config(s3={"addressing_style": "path"} if self.s3_endpoint_url else {}),
            )
        return self._s3

    @property
    def iam(self) -> Any:
        if self._iam is None:
            import boto3

            self._iam = boto3.client(
                "iam", endpoint_url=self.iam_endpoint_url, region_name=self.region
            )
        return self._iam

    def issue(self, *, attempt_id: str, checkpoint_uri: str) -> S3Credentials | None:
        location = parse_uri(checkpoint_uri)
        if not isinstance(location, S3Location):
            return None
        user = user_name(attempt_id)
        try:
            self.iam.create_user(UserName=user)
        except Exception as error:
            if _code(error) != "EntityAlreadyExists":  # a relaunch: its policy is rewritten
                raise
        # The policy before any key: a key never exists with more than it.
        self.iam.put_user_policy(
            UserName=user,
            PolicyName=POLICY_NAME,
            PolicyDocument=policy_document(bucket=location.bucket, prefix=location.prefix),
        )
        key = self.iam.create_access_key(UserName=user)["AccessKey"]
        credentials = S3Credentials(
            access_key_id=key["AccessKeyId"],
            secret_access_key=key["SecretAccessKey"],
            region=self.region,
        )
        self._wait_until_usable(credentials, location)
        return credentials

    def _wait_until_usable(self, credentials: S3Credentials, location: S3Location) -> None:
        """A trainer handed a key the store does not know yet fails its first checkpoint."""
        import boto3
        from botocore.config import Config

        s3 = boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint_url,
            aws_access_key_id=credentials.access_key_id,
            aws_secret_access_key=credentials.secret_access_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"} if self.s3_endpoint_url else {},
                retries={"max_attempts": 1},
            ),
        )
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            try:
                s3.list_objects_v2(Bucket=location.bucket, Prefix=f"{location.prefix}/", MaxKeys=1)
                return
            except Exception as error:
                code = _code(error)
                if code == "NoSuchBucket":
                    return  # the key works; the trainer will say the bucket is missing
                if code not in NOT_YET or time.monotonic() > deadline:
                    raise
            self.sleep(0.2)

    def revoke(
        self,
        *,
        attempt_id: str,
        checkpoint_uri: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        user = user_name(attempt_id)
        try:
            keys = self.iam.list_access_keys(UserName=user)["AccessKeyMetadata"]
            for key in keys:
                self.iam.delete_access_key(UserName=user, AccessKeyId=key["AccessKeyId"])
            # After its keys, so that its trainer starts no more; before its user, whose
            # existence is what makes the next sweep try again when this raises.
            location = parse_uri(checkpoint_uri) if checkpoint_uri else None
            if isinstance(location, S3Location) and ended_at is not None:
                self._abort_left_uploads(attempt_id, location, ended_at)
            self.iam.delete_user_policy(UserName=user, PolicyName=POLICY_NAME)
        except Exception as error:
            if _code(error) != "NoSuchEntity":
                raise
        try:
            self.iam.delete_user(UserName=user)
        except Exception as error:
            if _code(error) != "NoSuchEntity":
                raise
        log.info("revoked the storage credentials of attempt %s", attempt_id)

    def _abort_left_uploads(self, attempt_id: str, location: S3Location, before: datetime) -> None:
        """Best effort: a store that refuses the listing or the abort (a control plane role
        without those rights, a store without them) must not keep the attempt's user, which
        would keep every later sweep listing it; the parts stay, and the log says so."""
        try:
            aborted = abort_left_uploads(self.s3, location, ended_at=before)
        except Exception:
            log.warning(
                "could not abort the uploads attempt %s left unfinished under %s",
                attempt_id, location, exc_info=True,
            )  # fmt: skip
            return
        if aborted:
            log.info("aborted %d upload(s) attempt %s left unfinished", aborted, attempt_id)

    def issued(self) -> list[str]:
        attempts: list[str] = []
        marker: str | None = None
        while True:
            page = self.iam.list_users(**({"Marker": marker} if marker else {}))
            for user in page.get("Users", []):
                attempt = attempt_of(user["UserName"])
                if attempt is not None:
                    attempts.append(attempt)
            marker = page.get("Marker") if page.get("IsTruncated") else None
            if not marker:
                return attempts

"""Storage credentials: the S3 keys a trainer gets, and how far they reach.

A trainer runs a team's code, so whatever keys it holds, that code holds. Two modes
(`Settings.storage_credentials`, docs/security.md):

- `static`: the launcher's configured trainer keys, the same for every job (or none, where pods
  reach S3 through IRSA or workload identity). The weaker mode: one job's code can read and
  overwrite every other job's checkpoints under the same keys.
- `iam_users`: an identity per attempt (`iam_users.IamUsers`), allowed read, write and list
  under its own job's checkpoint prefix and nothing else, minted when the attempt launches and
  deleted once it has ended (`revocation.revoke_ended`, by the reconciling passes), with the
  multipart uploads it left unfinished.

An issuer is this small interface; the launchers only see the keys it hands out, on the
`LaunchRequest`, and copy them into the trainer's environment (or its pod's Secret).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class S3Credentials:
    """Keys meant for one trainer (or, in the static mode, for all of them), never the
    server's own."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    region: str = ""
    session_token: str = field(default="", repr=False)

    def variables(self) -> dict[str, str]:
        env = {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
        }
        if self.region:
            env["AWS_DEFAULT_REGION"] = self.region
        if self.session_token:
            env["AWS_SESSION_TOKEN"] = self.session_token
        return env


class StorageCredentials(Protocol):
    """Mints an attempt's own keys and takes them back."""

    def issue(self, *, attempt_id: str, checkpoint_uri: str) -> S3Credentials | None:
        """Keys that reach `checkpoint_uri` (the job's prefix) and nothing else; None when the
        prefix is not in S3 (a local directory needs no keys). Safe to repeat for a relaunch:
        keys issued before stay valid until `revoke`."""
        ...

    def revoke(
        self,
        *,
        attempt_id: str,
        checkpoint_uri: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        """Every key issued for the attempt stops working, and the multipart uploads it left
        unfinished under `checkpoint_uri` (those begun by `ended_at`: its end, or before the
        creation of another attempt of the job alive beside it) are aborted with the
        control plane's keys (left_uploads.py); without both, only the keys. Idempotent."""
        ...

    def issued(self) -> list[str]:
        """The attempts that hold keys now."""
        ...

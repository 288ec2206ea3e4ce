"""The issuer the settings ask for, or None in the static mode (the launcher's own keys)."""

from __future__ import annotations

from api.settings import Settings
from worker.storage_credentials import StorageCredentials
from worker.storage_credentials.iam_users import IamUsers


def from_settings(settings: Settings) -> StorageCredentials | None:
    if settings.storage_credentials == "iam_users":
        return IamUsers(
            iam_endpoint_url=settings.storage_iam_endpoint_url or settings.s3_endpoint_url,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
    return None

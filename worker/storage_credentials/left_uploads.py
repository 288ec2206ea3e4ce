"""The multipart uploads an ended attempt left unfinished, aborted with the control plane's keys.

A trainer killed mid-upload leaves its upload's parts stored (and, on a cloud, billed) until
someone aborts it. The trainer's own cleanup at its start (trainer.resume) lists the uploads
under its job's prefix, which an attempt's own identity may not do: SeaweedFS 4.48's IAM refuses
`s3:ListBucketMultipartUploads` in a policy (policy.py), so the listing is refused and the
uploads stayed. The control plane lists them instead, when it revokes the attempt's keys.

Another attempt of the job may be uploading under the same prefix: the next one (revocation is
a paced sweep), or the primary a standby stood beside (a standby that is withdrawn or lost ends
while the primary trains and checkpoints). So only uploads begun before every other attempt
alive beside this one was created, and by this one's end, are taken (`dead_before`): an attempt
uploads only after it was created. The store's clock dates an upload and the worker's an
attempt, so this assumes the two agree to within a trainer's start (seconds at least).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpujobs.checkpoints import S3Location


@dataclass(frozen=True)
class Lifetime:
    created_at: datetime
    ended_at: datetime | None  # None: still open


def dead_before(attempt: Lifetime, others: Iterable[Lifetime]) -> datetime:
    """The time before which every upload under the job's prefix belongs to an attempt that can
    no longer finish it: `attempt`'s end, or earlier, the creation of any other attempt of the
    job that was alive beside it (created by its end, not ended before it was created)."""
    assert attempt.ended_at is not None
    cutoff = attempt.ended_at
    for other in others:
        beside = other.created_at <= attempt.ended_at and (
            other.ended_at is None or other.ended_at > attempt.created_at
        )
        if beside:
            cutoff = min(cutoff, other.created_at)
    return cutoff


def left_behind(
    uploads: Iterable[Mapping[str, Any]], *, ended_at: datetime
) -> list[tuple[str, str]]:
    """(key, upload id) of the uploads begun by `ended_at`. SeaweedFS dates an upload to the
    second, so one dated the very second the attempt ended is its own."""
    return [
        (upload["Key"], upload["UploadId"]) for upload in uploads if upload["Initiated"] <= ended_at
    ]


def abort_left_uploads(s3: Any, location: S3Location, *, ended_at: datetime) -> int:
    """Abort the uploads under `location`'s prefix that `left_behind` names; how many."""
    prefix = f"{location.prefix}/" if location.prefix else ""
    paginator = s3.get_paginator("list_multipart_uploads")
    left: list[tuple[str, str]] = []
    try:
        for page in paginator.paginate(Bucket=location.bucket, Prefix=prefix):
            left += left_behind(page.get("Uploads", []), ended_at=ended_at)
    except s3.exceptions.NoSuchBucket:
        return 0
    aborted = 0
    for key, upload_id in left:
        try:
            s3.abort_multipart_upload(Bucket=location.bucket, Key=key, UploadId=upload_id)
            aborted += 1
        except s3.exceptions.NoSuchUpload:
            pass  # completed, or aborted by another worker's sweep, since the listing
    return aborted

"""The multipart uploads an ended attempt left unfinished, aborted with the control plane's keys.

A trainer killed mid-upload leaves its upload's parts stored (and, on a cloud, billed) until
someone aborts it. The trainer's own cleanup at its start (trainer.resume) lists the uploads
under its job's prefix, which an attempt's own identity may not do: SeaweedFS 4.48's IAM refuses
`s3:ListBucketMultipartUploads` in a policy (policy.py), so the listing is refused and the
uploads stayed. The control plane lists them instead, when it revokes the attempt's keys.

The job's next attempt may be uploading under the same prefix by then (revocation is a paced
sweep), so only uploads begun by the time the attempt ended are taken: the next attempt is
launched after that, and its trainer starts uploading later still. The store's clock dates an
upload and the worker's an attempt's end, so this assumes the two agree to within a trainer's
start (seconds at least).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpujobs.checkpoints import S3Location


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

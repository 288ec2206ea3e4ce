"""The policy of an attempt's identity: its job's checkpoint prefix, read, write and list.

Written as AWS IAM writes it, which SeaweedFS's embedded IAM evaluates the same way (tested live
in tests/storage): object actions on `bucket/prefix/*`, and listing on the bucket only where the
request's `s3:prefix` lies under the job's prefix. Nothing else is allowed: not another prefix,
not the bucket's listing, not HeadBucket, not the IAM API.
"""

from __future__ import annotations

import json
from typing import Any

# What the trainer's checkpoint store does under its prefix (trainer/checkpoint/store.py):
# single and multipart uploads (both PutObject), reads, deletes of old checkpoints, and aborting
# an upload that failed. Listing a bucket's multipart uploads is not here: SeaweedFS 4.48's IAM
# refuses the action's name in a policy, and the trainer's cleanup does without it.
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


def prefix_policy(*, bucket: str, prefix: str) -> dict[str, Any]:
    """The policy allowing `s3://bucket/prefix/` and nothing else."""
    prefix = prefix.strip("/")
    if not bucket or not prefix:
        raise ValueError("a per-attempt identity needs a bucket and a non-empty prefix")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ObjectsUnderTheJobsPrefix",
                "Effect": "Allow",
                "Action": list(OBJECT_ACTIONS),
                "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*",
            },
            {
                "Sid": "ListingOnlyUnderTheJobsPrefix",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": f"{prefix}/*"}},
            },
        ],
    }


def policy_document(*, bucket: str, prefix: str) -> str:
    return json.dumps(prefix_policy(bucket=bucket, prefix=prefix), separators=(",", ":"))

"""A hostile workload that attacks another job's checkpoints with the S3 keys its trainer was
given, then exits 1 before training.

`HOSTILE_VICTIM_URI` (spec.env) is the victim job's checkpoint prefix (`s3://bucket/prefix`),
`HOSTILE_VICTIM_KEY` an object under it. It tries to read, overwrite, delete and list the
victim's objects and the whole bucket, and to reach its own prefix, then prints one line,
`STORAGE-REPORT {json}`: each attempt's outcome (`ok` or the S3 error code) and the keys it held,
so that the test can try them again once the attempt has ended. It takes no options.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpujobs.checkpoints import S3Location, parse_uri
from gpujobs.runtime import ENV_RUN_CONFIG
from trainer.checkpoint.store import s3_client
from trainer.workloads import Workload


def _outcome(call: Callable[[], Any]) -> str:
    try:
        call()
    except Exception as error:
        response = getattr(error, "response", None) or {}
        return str(response.get("Error", {}).get("Code", type(error).__name__))
    return "ok"


def build(args: dict[str, Any]) -> Workload:
    victim = parse_uri(os.environ["HOSTILE_VICTIM_URI"])
    own = parse_uri(json.loads(Path(os.environ[ENV_RUN_CONFIG]).read_text())["checkpoint_uri"])
    assert isinstance(victim, S3Location) and isinstance(own, S3Location)
    key = os.environ["HOSTILE_VICTIM_KEY"]
    s3 = s3_client()
    bucket = victim.bucket
    outcomes = {
        "read victim": _outcome(lambda: s3.get_object(Bucket=bucket, Key=key)["Body"].read()),
        "overwrite victim": _outcome(lambda: s3.put_object(Bucket=bucket, Key=key, Body=b"x")),
        "delete victim": _outcome(lambda: s3.delete_object(Bucket=bucket, Key=key)),
        "list victim": _outcome(
            lambda: s3.list_objects_v2(Bucket=bucket, Prefix=f"{victim.prefix}/")
        ),
        "list bucket": _outcome(lambda: s3.list_objects_v2(Bucket=bucket)),
        "write own": _outcome(
            lambda: s3.put_object(Bucket=own.bucket, Key=f"{own.prefix}/mine", Body=b"mine")
        ),
        "read own": _outcome(
            lambda: s3.get_object(Bucket=own.bucket, Key=f"{own.prefix}/mine")["Body"].read()
        ),
        "list own": _outcome(
            lambda: s3.list_objects_v2(Bucket=own.bucket, Prefix=f"{own.prefix}/")
        ),
    }
    report = {
        "outcomes": outcomes,
        "access_key_id": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "own_prefix": own.prefix,
    }
    print("STORAGE-REPORT " + json.dumps(report), flush=True)
    os._exit(1)

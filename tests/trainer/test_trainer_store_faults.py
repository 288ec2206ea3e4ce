"""A store that fails to read is not a store of corrupt checkpoints: reads are retried, then the
attempt stops (74) without deleting anything, and the next attempt resumes from the newest
checkpoint. Uploads cut off by a kill or a failure do not stay behind on S3."""

from __future__ import annotations

import builtins
import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError

from devstack.s3server import S3Server
from gpujobs.checkpoints import step_dir
from tests.trainer.trainer_runs import run_config, run_in_process
from trainer.checkpoint import Store, latest_complete_step, open_store
from trainer.checkpoint import reader as checkpoint_reader
from trainer.checkpoint.store import LocalStore, S3Store
from trainer.loop import EXIT_STORE_UNAVAILABLE

MiB = 1024 * 1024


class FailingReads:
    """The real store, whose reads of keys under `failing` fail with EIO `times` times (None:
    always), as a disk or a network mount does."""

    def __init__(self, inner: Store, *, failing: str = "", times: int | None = None) -> None:
        self.inner = inner
        self.failing = failing
        self.times = times
        self.failed = 0

    def get(self, key: str) -> bytes:
        if key.startswith(self.failing) and (self.times is None or self.failed < self.times):
            self.failed += 1
            raise OSError(errno.EIO, "Input/output error", key)
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def delete(self, keys: builtins.list[str]) -> None:
        self.inner.delete(keys)

    def abort_incomplete(self, older_than_s: float = 0.0) -> int:
        return self.inner.abort_incomplete(older_than_s)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_reader, "READ_BACKOFF_S", 0.01)


def contents(store: Store) -> dict[str, bytes]:
    return {key: store.get(key) for key in store.list()}


def use_store(monkeypatch: pytest.MonkeyPatch, make: Callable[[], Store]) -> None:
    monkeypatch.setattr("trainer.start.open_store", lambda *args, **kwargs: make())


def test_read_errors_stop_the_attempt_and_delete_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ckpt")
    config = run_config(uri, steps=10, checkpoint={"every_steps": 5, "keep_last": 3})
    result, _ = run_in_process(config)
    assert result.exit_code == 0
    before = contents(open_store(uri))
    assert latest_complete_step(uri) == 10

    # The newest checkpoint cannot be read: it is not skipped for the older one, nor deleted.
    flaky = FailingReads(LocalStore(Path(uri)), failing=step_dir(10))
    use_store(monkeypatch, lambda: flaky)
    result, records = run_in_process(config)
    assert result.exit_code == EXIT_STORE_UNAVAILABLE
    assert flaky.failed == checkpoint_reader.READ_ATTEMPTS  # retried, then given up
    assert not [r for r in records if r.get("event") in ("resume", "start")]
    assert contents(open_store(uri)) == before

    monkeypatch.undo()
    result, records = run_in_process(config)
    assert result.exit_code == 0
    assert [r["step"] for r in records if r.get("event") == "resume"] == [10]


def test_transient_read_errors_are_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "ckpt")
    first = run_config(uri, steps=10, checkpoint={"every_steps": 5, "keep_last": 3})
    assert run_in_process(first)[0].exit_code == 0
    flaky = FailingReads(LocalStore(Path(uri)), times=3)
    use_store(monkeypatch, lambda: flaky)
    result, records = run_in_process({**first, "trainer": {**first["trainer"], "steps": 10}})
    assert flaky.failed == 3
    assert result.exit_code == 0
    assert [r["step"] for r in records if r.get("event") == "resume"] == [10]


def s3_faults(
    client: Any, *, failing: Callable[[Any], bool], kind: str, times: int | None
) -> list[int]:
    """Make the real client's requests for which `failing(request)` holds fail at the HTTP
    layer: a 503 from the server or a refused connection, `times` times (None: always)."""
    count = [0]

    def fail(request: Any, **_: Any) -> AWSResponse | None:
        if not failing(request) or (times is not None and count[0] >= times):
            return None
        count[0] += 1
        if kind == "connection":
            raise EndpointConnectionError(endpoint_url=request.url)
        body = b"<Error><Code>ServiceUnavailable</Code><Message>try later</Message></Error>"
        raw = type("Raw", (), {"stream": lambda self, **kw: iter([body])})()
        return AWSResponse(request.url, 503, {}, raw)

    client.meta.events.register("before-send.s3", fail)
    return count


def few_retries_client(s3: S3Server, attempts: int) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": attempts, "mode": "standard"}, s3={"addressing_style": "path"}
    )
    return boto3.client("s3", endpoint_url=s3.endpoint_url, config=config)


@pytest.mark.s3
@pytest.mark.parametrize("kind", ["503", "connection"])
def test_s3_read_errors_delete_nothing(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    uri = f"s3://checkpoints/faults-{kind}-{tmp_path.name}"
    config = run_config(uri, steps=10, checkpoint={"every_steps": 5, "keep_last": 3})
    config["s3_endpoint_url"] = s3_env.endpoint_url
    assert run_in_process(config)[0].exit_code == 0
    store = open_store(uri, endpoint_url=s3_env.endpoint_url)
    before = contents(store)

    bucket, prefix = uri.removeprefix("s3://").split("/", 1)
    client = few_retries_client(s3_env, 2)
    newest = f"{prefix}/{step_dir(10)}/"
    failures = s3_faults(client, failing=lambda r: newest in r.url, kind=kind, times=None)
    use_store(monkeypatch, lambda: S3Store(bucket, prefix, client))
    result, _ = run_in_process(config)
    assert result.exit_code == EXIT_STORE_UNAVAILABLE
    assert failures[0] >= checkpoint_reader.READ_ATTEMPTS
    assert contents(store) == before

    monkeypatch.undo()
    result, records = run_in_process(config)
    assert result.exit_code == 0
    assert [r["step"] for r in records if r.get("event") == "resume"] == [10]


def uploads(client: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    return list(client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []))


@pytest.mark.s3
def test_a_run_aborts_the_uploads_a_killed_attempt_left(s3_env: S3Server, tmp_path: Path) -> None:
    bucket, prefix = "checkpoints", f"multipart-{tmp_path.name}"
    open_store(f"s3://{bucket}/{prefix}", endpoint_url=s3_env.endpoint_url)  # the bucket
    client = s3_env.client()
    # What a writer killed mid-upload leaves: an upload with a part, never completed.
    key = f"{prefix}/{step_dir(5)}/model.pt"
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)
    client.upload_part(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 5 * MiB
    )
    other_key = f"other-{prefix}/{step_dir(5)}/model.pt"
    other = client.create_multipart_upload(Bucket=bucket, Key=other_key)
    assert len(uploads(client, bucket, f"{prefix}/")) == 1

    config = run_config(f"s3://{bucket}/{prefix}", steps=2, checkpoint={"every_steps": 5})
    config["s3_endpoint_url"] = s3_env.endpoint_url
    assert run_in_process(config)[0].exit_code == 0
    assert uploads(client, bucket, f"{prefix}/") == []
    # Another job's prefix is not this run's to clean.
    assert [u["UploadId"] for u in uploads(client, bucket, f"other-{prefix}/")] == [
        other["UploadId"]
    ]
    client.abort_multipart_upload(Bucket=bucket, Key=other_key, UploadId=other["UploadId"])


@pytest.mark.s3
def test_a_failed_multipart_upload_is_aborted(s3_env: S3Server, tmp_path: Path) -> None:
    bucket, prefix = "checkpoints", f"failed-upload-{tmp_path.name}"
    client = few_retries_client(s3_env, 1)
    store = S3Store(bucket, prefix, client)
    store.ensure_bucket()
    # A part fails, and so does every abort the transfer manager makes (its connection is
    # down): without another abort once it gave up, the parts already sent would stay stored.
    transferring = [False]
    transfer = client.upload_fileobj

    def upload_fileobj(*args: Any, **kwargs: Any) -> Any:
        transferring[0] = True
        try:
            return transfer(*args, **kwargs)
        finally:
            transferring[0] = False

    client.upload_fileobj = upload_fileobj
    second_part = "partNumber=2"
    parts = s3_faults(client, failing=lambda r: second_part in r.url, kind="connection", times=None)
    aborts = s3_faults(
        client,
        failing=lambda r: r.method == "DELETE" and transferring[0],
        kind="connection",
        times=None,
    )
    with pytest.raises(EndpointConnectionError):
        store.put("step-000000000001/model.pt", b"y" * 40 * MiB)
    assert parts[0] >= 1 and aborts[0] >= 1
    assert uploads(s3_env.client(), bucket, f"{prefix}/") == []
    assert store.list() == []


def test_a_run_removes_temporary_files_a_killed_writer_left(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    leftover = tmp_path / "ckpt" / step_dir(5) / ".model.pt.abc123.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half a checkpoint")
    assert run_in_process(run_config(uri, steps=2))[0].exit_code == 0
    assert not leftover.exists()

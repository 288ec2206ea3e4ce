"""Where checkpoint bytes live: a local directory or an S3 prefix, behind one small interface.

Both stores make each object appear atomically (a local file is renamed into place after an
fsync; an S3 object only exists once its upload completed), which is what lets the manifest,
written last, stand for a complete checkpoint.

`get` raises FileNotFoundError for a key that does not exist, in both stores; any other
exception is a failure to read, which says nothing about the checkpoint itself.
"""

from __future__ import annotations

import builtins
import io
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from gpujobs.checkpoints import LocalLocation, parse_uri

MiB = 1024 * 1024
TEMP_SUFFIX = ".tmp"

log = logging.getLogger(__name__)


class Store(Protocol):
    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def delete(self, keys: builtins.list[str]) -> None: ...

    def abort_incomplete(self, older_than_s: float = 0.0) -> int:
        """Remove what writes cut off by a kill left behind (never a complete object), started
        at least `older_than_s` ago; returns how many."""
        ...


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def put(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        # The rename is only durable once the directory entry is.
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def list(self, prefix: str = "") -> list[str]:
        keys: builtins.list[str] = []
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                if name.startswith("."):
                    continue  # in-flight temporary files
                key = (Path(dirpath) / name).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, keys: builtins.list[str]) -> None:
        for key in keys:
            (self.root / key).unlink(missing_ok=True)
        for key in keys:
            parent = (self.root / key).parent
            if parent != self.root and parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()

    def abort_incomplete(self, older_than_s: float = 0.0) -> int:
        cutoff = time.time() - older_than_s
        removed = 0
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                path = Path(dirpath) / name
                if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
                    continue
                try:
                    if path.stat().st_mtime <= cutoff:
                        path.unlink()
                        removed += 1
                except FileNotFoundError:
                    continue  # its writer finished or removed it meanwhile
        return removed


class S3Store:
    """An S3 prefix. Credentials come from the environment, as boto3 finds them."""

    def __init__(self, bucket: str, prefix: str, client: Any) -> None:
        from boto3.s3.transfer import TransferConfig

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        # Parts of 16 MiB sent 8 at a time keep a single large shard close to the link's speed;
        # small objects (manifests, rank records) stay single PUTs.
        self.transfer = TransferConfig(
            multipart_threshold=32 * MiB,
            multipart_chunksize=16 * MiB,
            max_concurrency=8,
            use_threads=True,
        )

    def __repr__(self) -> str:
        return f"S3Store('s3://{self.bucket}/{self.prefix}')"

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        if len(data) < self.transfer.multipart_threshold:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
            return
        try:
            self.client.upload_fileobj(
                io.BytesIO(data), self.bucket, self._key(key), Config=self.transfer
            )
        except Exception:
            # Parts already sent are stored (and billed) until the upload is aborted; the
            # transfer manager tries to abort, but not when the failure is the connection.
            try:
                self._abort_uploads(self._key(key), older_than_s=0.0, exact=True)
            except Exception as exc:
                log.warning("could not abort the failed upload of %s (%s)", key, exc)
            raise

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        buffer = io.BytesIO()
        try:
            self.client.download_fileobj(self.bucket, self._key(key), buffer, Config=self.transfer)
        except ClientError as exc:
            if _error_code(exc) in NOT_FOUND_CODES:
                raise FileNotFoundError(f"s3://{self.bucket}/{self._key(key)}") from exc
            raise
        return buffer.getvalue()

    def list(self, prefix: str = "") -> list[str]:
        full = self._key(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: builtins.list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(obj["Key"][strip:] for obj in page.get("Contents", []))
        except self.client.exceptions.NoSuchBucket:
            return []  # nothing was ever saved here
        return sorted(keys)

    def delete(self, keys: builtins.list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def abort_incomplete(self, older_than_s: float = 0.0) -> int:
        return self._abort_uploads(
            f"{self.prefix}/" if self.prefix else "", older_than_s=older_than_s, exact=False
        )

    def _abort_uploads(self, prefix: str, *, older_than_s: float, exact: bool) -> int:
        """Abort the multipart uploads under `prefix` (of key `prefix` itself if `exact`)."""
        cutoff = time.time() - older_than_s
        aborted = 0
        paginator = self.client.get_paginator("list_multipart_uploads")
        try:
            pages = list(paginator.paginate(Bucket=self.bucket, Prefix=prefix))
        except self.client.exceptions.NoSuchBucket:
            return 0
        for page in pages:
            for upload in page.get("Uploads", []):
                if exact and upload["Key"] != prefix:
                    continue
                if older_than_s and upload["Initiated"].timestamp() > cutoff:
                    continue
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
                aborted += 1
        return aborted

    def ensure_bucket(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in BUCKET_HIDDEN_CODES:
                # Keys limited to the job's prefix (docs/security.md) may not look at the
                # bucket itself, nor create one: the control plane does, and the first write
                # says so if it is missing.
                return
            if code not in ("404", "NoSuchBucket"):
                raise
            self.client.create_bucket(Bucket=self.bucket)


NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
BUCKET_HIDDEN_CODES = frozenset({"403", "AccessDenied", "Forbidden"})


def _error_code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def s3_client(endpoint_url: str | None = None) -> Any:
    import boto3
    from botocore.config import Config

    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    config = Config(
        retries={"max_attempts": 5, "mode": "standard"},
        max_pool_connections=16,
        s3={"addressing_style": "path"} if endpoint else {},
    )
    return boto3.client("s3", endpoint_url=endpoint, config=config)


def open_store(uri: str, *, endpoint_url: str | None = None, create: bool = True) -> Store:
    """`s3://bucket/prefix`, `file:///dir` or a plain directory path (gpujobs.checkpoints)."""
    location = parse_uri(uri)
    if isinstance(location, LocalLocation):
        return LocalStore(location.directory)
    store = S3Store(location.bucket, location.prefix, s3_client(endpoint_url))
    if create:
        store.ensure_bucket()
    return store

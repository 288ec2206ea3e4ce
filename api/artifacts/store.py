"""Read-only access to a job's checkpoint prefix, wherever the deployment keeps checkpoints:
a local directory (embedded mode) or an S3 prefix (credentials as boto3 finds them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

CHUNK = 1024 * 1024


class ArtifactStore(Protocol):
    def read(self, key: str) -> bytes: ...

    def stream(self, key: str) -> Iterator[bytes]: ...

    def list_keys(self) -> list[str]: ...


class LocalArtifacts:
    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def stream(self, key: str) -> Iterator[bytes]:
        with open(self.root / key, "rb") as file:
            while chunk := file.read(CHUNK):
                yield chunk

    def list_keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            path.relative_to(self.root).as_posix()
            for path in self.root.rglob("*")
            if path.is_file() and not path.name.startswith(".")  # in-flight temporary files
        )


class S3Artifacts:
    def __init__(self, *, bucket: str, prefix: str, client: Any) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client

    def read(self, key: str) -> bytes:
        body = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")["Body"]
        return bytes(body.read())

    def stream(self, key: str) -> Iterator[bytes]:
        body = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")["Body"]
        try:
            yield from body.iter_chunks(CHUNK)
        finally:
            body.close()

    def list_keys(self) -> list[str]:
        found: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/"
        )
        for page in pages:
            found += [item["Key"][len(self.prefix) + 1 :] for item in page.get("Contents", [])]
        return sorted(found)


def for_job(*, checkpoint_root: str, job_id: str, s3_endpoint_url: str) -> ArtifactStore:
    """The job's prefix under the deployment's checkpoint root (as the launcher gave it)."""
    uri = f"{checkpoint_root.rstrip('/')}/{job_id}"
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        import boto3

        client = boto3.client("s3", endpoint_url=s3_endpoint_url or None)
        return S3Artifacts(bucket=parsed.netloc, prefix=parsed.path, client=client)
    return LocalArtifacts(Path(parsed.path if parsed.scheme == "file" else uri))

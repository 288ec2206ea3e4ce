"""Read-only access to a job's checkpoint prefix, wherever the deployment keeps checkpoints:
a local directory (embedded mode) or an S3 prefix (credentials as boto3 finds them).

Everything under the prefix was written by the job's trainer, which is not trusted. The local
store reaches a file only through directories opened one component at a time without following
a link, opens only regular files (a FIFO hangs its reader, a device never ends), and both
stores hand out a file only when it has exactly the size asked for, and then at most that many
bytes, the last of them only once all match the sha256 asked for.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from gpujobs.checkpoints import S3Location, parse_uri

CHUNK = 1024 * 1024

# Every component is opened without following a link; O_NONBLOCK so that even a FIFO swapped in
# between our check and our open cannot block the open.
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class ArtifactMissing(LookupError):
    """No such file under the job's prefix."""


class ArtifactRefused(Exception):
    """There is something at the key, but not a regular file that can be served as asked."""


class ArtifactStore(Protocol):
    def files(self) -> dict[str, int]:
        """The regular files under the prefix, by key (`step-.../name`): their sizes."""
        ...

    def read(self, key: str, *, limit: int) -> bytes:
        """A whole regular file of at most `limit` bytes."""
        ...

    def open(self, key: str, *, size: int, sha256: str) -> Iterator[bytes]:
        """A regular file of exactly `size` bytes, checked before the first byte is read."""
        ...


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISREG: "a regular file",
        stat.S_ISLNK: "a symbolic link",
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a device",
        stat.S_ISBLK: "a device",
        stat.S_ISSOCK: "a socket",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "of an unknown kind")


def _kind_at(name: str, *, parent: int) -> str:
    try:
        return _kind(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return "gone"


def _components(key: str) -> list[str]:
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ArtifactMissing(key)
    return parts


def _open_at(name: str, flags: int, *, parent: int, key: str) -> int:
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError:
        raise ArtifactMissing(key) from None
    except PermissionError as error:  # a trainer may chmod its files (the server is not root)
        raise ArtifactRefused(f"{name} cannot be read: permission denied") from error
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):  # a link; not a dir
            raise
        expected = "a directory" if flags & os.O_DIRECTORY else "a regular file"
        kind = _kind_at(name, parent=parent)
        raise ArtifactRefused(f"{name} is {kind}, not {expected}") from error


def _verified(chunks: Iterator[bytes], *, size: int, sha256: str, key: str) -> Iterator[bytes]:
    """At most `size` bytes; the last chunk is held back until all of them match `sha256`, so a
    file that does not (forged, or changed after it was checked) is cut short: the client sees
    fewer bytes than its Content-Length, never a whole file that nobody vouched for."""
    digest = hashlib.sha256()
    received = 0
    pending = b""
    try:
        for chunk in chunks:
            chunk = chunk[: size - received]
            received += len(chunk)
            digest.update(chunk)
            if pending:
                yield pending
            pending = chunk
            if received == size:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if received != size or digest.hexdigest() != sha256:
        raise ArtifactRefused(f"{key} does not match the sha256 its manifest promised")
    if pending:
        yield pending


class LocalArtifacts:
    def __init__(self, *, root: Path, job_id: str) -> None:
        self.root = root  # the operator's checkpoint root: trusted, so it may hold links
        self.job_parts = _components(job_id)  # from here on, every component is the trainer's

    @contextmanager
    def _directory(self, parts: Sequence[str], *, key: str) -> Iterator[int]:
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ArtifactMissing(key) from None
        try:
            for part in [*self.job_parts, *parts]:
                inner = _open_at(part, _DIRECTORY, parent=fd, key=key)
                os.close(fd)
                fd = inner
            yield fd
        finally:
            os.close(fd)

    def _open_file(self, key: str) -> int:
        *parts, name = _components(key)
        with self._directory(parts, key=key) as parent:
            try:
                seen = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                raise ArtifactMissing(key) from None
            if not stat.S_ISREG(seen.st_mode):  # decided before opening: a device is never opened
                raise ArtifactRefused(f"{name} is {_kind(seen.st_mode)}, not a regular file")
            if seen.st_nlink != 1:  # a hard link to a file of the server's (protected_hardlinks=0)
                links = seen.st_nlink
                raise ArtifactRefused(f"{name} has {links} links; a checkpoint file has one")
            fd = _open_at(name, _FILE, parent=parent, key=key)
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            os.close(fd)
            raise ArtifactRefused(f"{name} was replaced while it was opened")
        return fd

    def files(self) -> dict[str, int]:
        found: dict[str, int] = {}
        try:
            with self._directory([], key="") as prefix:
                for directory in os.listdir(prefix):
                    found.update(self._files_in(prefix, directory))
        except ArtifactMissing:
            return {}
        return found

    def _files_in(self, prefix: int, directory: str) -> dict[str, int]:
        try:
            fd = _open_at(directory, _DIRECTORY, parent=prefix, key=directory)
        except (ArtifactMissing, ArtifactRefused):
            return {}  # a file, a link, or gone: not a checkpoint directory
        found: dict[str, int] = {}
        try:
            for name in os.listdir(fd):
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:  # gone since listed, or a directory without search permission
                    continue
                if stat.S_ISREG(info.st_mode) and not name.startswith("."):  # .x: in flight
                    found[f"{directory}/{name}"] = info.st_size
        finally:
            os.close(fd)
        return found

    def read(self, key: str, *, limit: int) -> bytes:
        with os.fdopen(self._open_file(key), "rb") as file:  # buffered: reads until limit + 1
            data = file.read(limit + 1)
        if len(data) > limit:
            raise ArtifactRefused(f"{key} is larger than {limit} bytes")
        return data

    def open(self, key: str, *, size: int, sha256: str) -> Iterator[bytes]:
        file = os.fdopen(self._open_file(key), "rb", buffering=0)
        actual = os.fstat(file.fileno()).st_size
        if actual != size:
            file.close()
            raise ArtifactRefused(f"{key} is {actual} bytes, its manifest says {size}")
        return _verified(_read_chunks(file), size=size, sha256=sha256, key=key)


def _read_chunks(file: Any) -> Iterator[bytes]:
    with file:
        while chunk := file.read(CHUNK):
            yield chunk


class S3Artifacts:
    """An object store holds no links or FIFOs; what a trainer controls there is sizes."""

    def __init__(self, *, bucket: str, prefix: str, client: Any) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client

    def _get(self, key: str) -> tuple[Any, int]:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")
        except self.client.exceptions.NoSuchKey:
            raise ArtifactMissing(key) from None
        return response["Body"], int(response["ContentLength"])

    def files(self) -> dict[str, int]:
        found: dict[str, int] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/"
        )
        for page in pages:
            for item in page.get("Contents", []):
                found[item["Key"][len(self.prefix) + 1 :]] = int(item["Size"])
        return found

    def read(self, key: str, *, limit: int) -> bytes:
        body, length = self._get(key)
        try:
            data = bytes(body.read(limit + 1)) if length <= limit else b""
        finally:
            body.close()
        if length > limit or len(data) > limit:
            raise ArtifactRefused(f"{key} is larger than {limit} bytes")
        return data

    def open(self, key: str, *, size: int, sha256: str) -> Iterator[bytes]:
        body, length = self._get(key)
        if length != size:
            body.close()
            raise ArtifactRefused(f"{key} is {length} bytes, its manifest says {size}")
        return _verified(_body_chunks(body), size=size, sha256=sha256, key=key)


def _body_chunks(body: Any) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(CHUNK)
    finally:
        body.close()


def for_prefix(*, checkpoint_uri: str, s3_endpoint_url: str) -> ArtifactStore:
    """The job's prefix, as its launch gave it to the trainer (gpujobs.checkpoints). Locally,
    the directory holding the prefix is the operator's and trusted; the prefix is the trainer's."""
    location = parse_uri(checkpoint_uri)
    if isinstance(location, S3Location):
        import boto3

        client = boto3.client("s3", endpoint_url=s3_endpoint_url or None)
        return S3Artifacts(bucket=location.bucket, prefix=location.prefix, client=client)
    return LocalArtifacts(root=location.directory.parent, job_id=location.directory.name)

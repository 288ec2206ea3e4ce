"""The checkpoint contract: where a job's checkpoints live and how they are laid out there.

The worker gives each job a prefix under the deployment's checkpoint root, recorded on the job at
its first launch; the trainer writes it, the API reads it for the artifacts endpoints. Under it:

    step-000000000200/model.pt          shared state (rank 0): model, optimizer, scheduler, scaler
    step-000000000200/rank-00001.pt     one per rank: every RNG and the data position
    step-000000000200/rank-00001.json   that rank's record: size and sha256 of its shard
    step-000000000200/manifest.json     written last, by rank 0, once every shard is in place

A checkpoint without a manifest, or whose files do not match it, is never loaded or served.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

FORMAT = 1
SHARED_FILE = "model.pt"
MANIFEST_FILE = "manifest.json"
STEP_DIR = re.compile(r"^step-(\d{12})$")
# A file a manifest may list: a plain name, no separator, no leading dot (in-flight temporary
# files start with one).
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


# Where: the job's prefix, and what a checkpoint URI names.


def job_checkpoint_uri(root: str, job_id: str) -> str:
    """The job's own prefix under the deployment's checkpoint root."""
    return f"{root.rstrip('/')}/{job_id}"


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # without leading or trailing `/`; "" for the whole bucket


@dataclass(frozen=True)
class LocalLocation:
    directory: Path


def parse_uri(uri: str) -> S3Location | LocalLocation:
    """`s3://bucket/prefix`, `file:///dir` or a plain directory path; ValueError otherwise."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"checkpoint URI {uri!r} has no bucket")
        return S3Location(bucket=parsed.netloc, prefix=parsed.path.strip("/"))
    if parsed.scheme == "file":
        return LocalLocation(Path(parsed.path))
    if parsed.scheme in ("", None) or len(parsed.scheme) == 1:  # a Windows drive letter
        return LocalLocation(Path(uri))
    raise ValueError(f"checkpoint URI {uri!r}: use a directory, file:///dir or s3://bucket/prefix")


# The layout under a job's prefix.


def step_dir(step: int) -> str:
    return f"step-{step:012d}"


def step_of(directory: str) -> int | None:
    """The step a directory name holds, None when it is not a checkpoint's directory."""
    match = STEP_DIR.match(directory)
    return int(match.group(1)) if match else None


def manifest_key(step: int) -> str:
    return f"{step_dir(step)}/{MANIFEST_FILE}"


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def rank_record(rank: int) -> str:
    return f"rank-{rank:05d}.json"


def steps_in(keys: list[str]) -> dict[int, set[str]]:
    """Group keys under a job's prefix by checkpoint step: {step: {file names}}."""
    steps: dict[int, set[str]] = {}
    for key in keys:
        head, _, name = key.partition("/")
        step = step_of(head)
        if step is not None and name:
            steps.setdefault(step, set()).add(name)
    return steps


# The manifest.


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str

    @classmethod
    def of(cls, data: bytes) -> FileEntry:
        return cls(size=len(data), sha256=digest(data))

    def matches(self, data: bytes) -> bool:
        return len(data) == self.size and digest(data) == self.sha256


@dataclass
class Manifest:
    step: int
    world_size: int
    files: dict[str, FileEntry]
    meta: dict[str, Any] = field(default_factory=dict)

    def dumps(self) -> bytes:
        body = {
            "format": FORMAT,
            "step": self.step,
            "world_size": self.world_size,
            "files": {name: vars(entry) for name, entry in sorted(self.files.items())},
            "meta": self.meta,
        }
        return json.dumps(body, indent=1).encode()

    @classmethod
    def loads(cls, data: bytes) -> Manifest:
        """The trainer's reading, to resume from its own checkpoint."""
        body = json.loads(data)
        if body.get("format") != FORMAT:
            raise ValueError(f"unknown checkpoint format {body.get('format')!r}")
        return cls(
            step=int(body["step"]),
            world_size=int(body["world_size"]),
            files={name: FileEntry(**entry) for name, entry in body["files"].items()},
            meta=body.get("meta", {}),
        )


def listed_files(data: bytes) -> dict[str, FileEntry]:
    """The files an untrusted manifest lists, each a plain name with a size and a sha256;
    ValueError saying what is wrong otherwise."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):  # a manifest nested deep enough to exhaust the stack
        raise ValueError("it is not JSON") from None
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, dict):
        raise ValueError("it has no `files` object")
    return {name: _listed(name, entry) for name, entry in files.items()}


def _listed(name: object, entry: object) -> FileEntry:
    if not isinstance(name, str) or not FILE_NAME.match(name) or name == MANIFEST_FILE:
        raise ValueError(f"it lists {name!r}, which is not a plain file name")
    if not isinstance(entry, dict):
        raise ValueError(f"its entry for {name} is not an object")
    size, sha256 = entry.get("size"), entry.get("sha256")
    if type(size) is not int or size < 0:
        raise ValueError(f"its size for {name} is not a whole number of bytes")
    if not isinstance(sha256, str) or not SHA256.match(sha256):
        raise ValueError(f"its sha256 for {name} is not 64 hex digits")
    return FileEntry(size=size, sha256=sha256)

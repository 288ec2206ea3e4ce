"""How a checkpoint is laid out in a store, and the manifest that vouches for it.

    step-000000000200/model.pt          shared state (rank 0): model, optimizer, scheduler, scaler
    step-000000000200/rank-00001.pt     one per rank: every RNG and the data position
    step-000000000200/rank-00001.json   that rank's record: size and sha256 of its shard
    step-000000000200/manifest.json     written last, by rank 0, once every shard is in place

A checkpoint without a manifest, or whose files do not match it, is never loaded.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

FORMAT = 1
SHARED_FILE = "model.pt"
MANIFEST_FILE = "manifest.json"
STEP_DIR = re.compile(r"^step-(\d{12})$")


def step_dir(step: int) -> str:
    return f"step-{step:012d}"


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def rank_record(rank: int) -> str:
    return f"rank-{rank:05d}.json"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
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
        body = json.loads(data)
        if body.get("format") != FORMAT:
            raise ValueError(f"unknown checkpoint format {body.get('format')!r}")
        return cls(
            step=int(body["step"]),
            world_size=int(body["world_size"]),
            files={name: FileEntry(**entry) for name, entry in body["files"].items()},
            meta=body.get("meta", {}),
        )


def steps_in(keys: list[str]) -> dict[int, set[str]]:
    """Group store keys by checkpoint step: {step: {file names}}."""
    steps: dict[int, set[str]] = {}
    for key in keys:
        head, _, name = key.partition("/")
        match = STEP_DIR.match(head)
        if match and name:
            steps.setdefault(int(match.group(1)), set()).add(name)
    return steps

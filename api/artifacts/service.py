"""A job's artifacts: its complete checkpoints (the ones a manifest vouches for), the final one
holding the trained weights. Only files a manifest lists can be downloaded.

The manifest and the files are the trainer's output, so untrusted: a manifest is read only when
it is a small regular file, lists only plain names with a size and a sha256, and a file is served
only when it is a regular file of the size its manifest promised (store.py says how)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

from api.artifacts.store import ArtifactMissing, ArtifactRefused, ArtifactStore
from api.errors import Conflict, NotFound
from api.models import Job
from gpujobs.resources import ArtifactFile, Artifacts, Checkpoint, JobStatus

log = logging.getLogger(__name__)

# The trainer's checkpoint layout (trainer/checkpoint/layout.py): `step-<12 digits>/<file>`,
# with `manifest.json` written last, once every file it lists is in place.
STEP_DIR = re.compile(r"^step-(\d{12})$")
MANIFEST = "manifest.json"
MANIFEST_LIMIT = 4 * 1024 * 1024  # a manifest lists two files per rank: far below this
# A plain file name: no separator, no leading dot (the trainer's in-flight temporary files).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Entry:
    size: int
    sha256: str


@dataclass(frozen=True)
class Download:
    size: int
    chunks: Iterator[bytes]


def _step_dir(step: int) -> str:
    return f"step-{step:012d}"


def _entry(name: object, entry: object) -> Entry:
    if not isinstance(name, str) or not NAME.match(name) or name == MANIFEST:
        raise ValueError(f"it lists {name!r}, which is not a plain file name")
    if not isinstance(entry, dict):
        raise ValueError(f"its entry for {name} is not an object")
    size, sha256 = entry.get("size"), entry.get("sha256")
    if type(size) is not int or size < 0:
        raise ValueError(f"its size for {name} is not a whole number of bytes")
    if not isinstance(sha256, str) or not SHA256.match(sha256):
        raise ValueError(f"its sha256 for {name} is not 64 hex digits")
    return Entry(size=size, sha256=sha256)


def _parse(data: bytes) -> dict[str, Entry]:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):  # a manifest nested deep enough to exhaust the stack
        raise ValueError("it is not JSON") from None
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, dict):
        raise ValueError("it has no `files` object")
    return {name: _entry(name, entry) for name, entry in files.items()}


def _manifest(store: ArtifactStore, step: int) -> dict[str, Entry]:
    """The step's manifest; ArtifactMissing when there is none, ArtifactRefused when it is not
    a small regular file holding a manifest."""
    key = f"{_step_dir(step)}/{MANIFEST}"
    data = store.read(key, limit=MANIFEST_LIMIT)
    try:
        return _parse(data)
    except ValueError as error:
        raise ArtifactRefused(f"{key} is not a manifest: {error}") from None


def _steps_with_manifest(files: dict[str, int]) -> list[int]:
    steps = []
    for key in files:
        directory, _, name = key.partition("/")
        match = STEP_DIR.match(directory)
        if match and name == MANIFEST:
            steps.append(int(match.group(1)))
    return sorted(steps)


def _complete(
    store: ArtifactStore, files: dict[str, int], step: int, job: Job
) -> dict[str, Entry] | None:
    """The manifest's entries when every file it lists is a regular file of the promised size."""
    try:
        entries = _manifest(store, step)
    except (ArtifactMissing, ArtifactRefused) as error:
        log.warning("job %s: checkpoint %d left out: %s", job.id, step, error)
        return None
    for name, entry in entries.items():
        size = files.get(f"{_step_dir(step)}/{name}")
        if size != entry.size:
            found = "missing or not a regular file" if size is None else f"{size} bytes"
            log.warning(
                "job %s: checkpoint %d left out: %s is %s, its manifest says %d bytes",
                job.id, step, name, found, entry.size,
            )  # fmt: skip
            return None
    return entries


def list_artifacts(*, store: ArtifactStore, job: Job, base_url: str) -> Artifacts:
    try:
        files = store.files()
    except ArtifactRefused as refused:
        raise Conflict(f"job {job.id}'s checkpoints cannot be listed: {refused}") from None
    checkpoints = []
    for step in _steps_with_manifest(files):
        entries = _complete(store, files, step, job)
        if entries is None:
            continue
        listed = [
            ArtifactFile(
                name=name,
                size=entry.size,
                sha256=entry.sha256,
                url=f"{base_url}/v1/jobs/{job.id}/artifacts/{step}/{name}",
            )
            for name, entry in sorted(entries.items())
        ]
        checkpoints.append(Checkpoint(step=step, files=listed))
    final = None
    if JobStatus(job.status) == JobStatus.SUCCEEDED and checkpoints:
        final = checkpoints[-1].step  # the trainer's last save, after the last step
    return Artifacts(job_id=job.id, final_step=final, checkpoints=checkpoints)


def open_file(*, store: ArtifactStore, job: Job, step: int, name: str) -> Download:
    """A file that the step's manifest lists (so no other key can be named), opened and checked
    before the response starts: every refusal is a 4xx naming the artifact."""
    try:
        entry = _manifest(store, step).get(name)
        if entry is None:
            raise ArtifactMissing(name)
        chunks = store.open(f"{_step_dir(step)}/{name}", size=entry.size, sha256=entry.sha256)
    except ArtifactMissing:
        raise NotFound(f"job {job.id} has no artifact {step}/{name}") from None
    except ArtifactRefused as refused:
        message = f"job {job.id}'s artifact {step}/{name} cannot be served: {refused}"
        raise Conflict(message) from None
    return Download(size=entry.size, chunks=chunks)

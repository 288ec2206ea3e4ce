"""A job's artifacts: its complete checkpoints (the ones a manifest vouches for), the final one
holding the trained weights. Only files a manifest lists can be downloaded.

The manifest and the files are the trainer's output, so untrusted: a manifest is read only when
it is a small regular file, lists only plain names with a size and a sha256, and a file is served
only when it is a regular file of the size its manifest promised (store.py says how)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from api.artifacts.store import ArtifactMissing, ArtifactRefused, ArtifactStore
from api.errors import Conflict, NotFound
from api.models import Job
from gpujobs.checkpoints import (
    MANIFEST_FILE,
    FileEntry,
    listed_files,
    manifest_key,
    step_dir,
    step_of,
)
from gpujobs.resources import ArtifactFile, Artifacts, Checkpoint, JobStatus

log = logging.getLogger(__name__)

MANIFEST_LIMIT = 4 * 1024 * 1024  # a manifest lists two files per rank: far below this


@dataclass(frozen=True)
class Download:
    size: int
    chunks: Iterator[bytes]


def _manifest(store: ArtifactStore, step: int) -> dict[str, FileEntry]:
    """The step's manifest; ArtifactMissing when there is none, ArtifactRefused when it is not
    a small regular file holding a manifest."""
    key = manifest_key(step)
    data = store.read(key, limit=MANIFEST_LIMIT)
    try:
        return listed_files(data)
    except ValueError as error:
        raise ArtifactRefused(f"{key} is not a manifest: {error}") from None


def _steps_with_manifest(files: dict[str, int]) -> list[int]:
    steps = []
    for key in files:
        directory, _, name = key.partition("/")
        step = step_of(directory)
        if step is not None and name == MANIFEST_FILE:
            steps.append(step)
    return sorted(steps)


def _complete(
    store: ArtifactStore, files: dict[str, int], step: int, job: Job
) -> dict[str, FileEntry] | None:
    """The manifest's entries when every file it lists is a regular file of the promised size."""
    try:
        entries = _manifest(store, step)
    except (ArtifactMissing, ArtifactRefused) as error:
        log.warning("job %s: checkpoint %d left out: %s", job.id, step, error)
        return None
    for name, entry in entries.items():
        size = files.get(f"{step_dir(step)}/{name}")
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
        chunks = store.open(f"{step_dir(step)}/{name}", size=entry.size, sha256=entry.sha256)
    except ArtifactMissing:
        raise NotFound(f"job {job.id} has no artifact {step}/{name}") from None
    except ArtifactRefused as refused:
        message = f"job {job.id}'s artifact {step}/{name} cannot be served: {refused}"
        raise Conflict(message) from None
    return Download(size=entry.size, chunks=chunks)

"""A job's artifacts: its complete checkpoints (the ones a manifest vouches for), the final one
holding the trained weights. Only files a manifest lists can be downloaded."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from api.artifacts.store import ArtifactStore
from api.errors import NotFound
from api.models import Job
from gpujobs.resources import ArtifactFile, Artifacts, Checkpoint, JobStatus

# The trainer's checkpoint layout (trainer/checkpoint/layout.py): `step-<12 digits>/<file>`,
# with `manifest.json` written last, once every file it lists is in place.
STEP_DIR = re.compile(r"^step-(\d{12})$")
MANIFEST = "manifest.json"


def _step_dir(step: int) -> str:
    return f"step-{step:012d}"


def _manifest_files(store: ArtifactStore, step: int) -> dict[str, dict[str, object]]:
    body = json.loads(store.read(f"{_step_dir(step)}/{MANIFEST}"))
    files = body.get("files")
    return files if isinstance(files, dict) else {}


def _complete_steps(store: ArtifactStore) -> list[int]:
    steps = []
    for key in store.list_keys():
        directory, _, name = key.partition("/")
        match = STEP_DIR.match(directory)
        if match and name == MANIFEST:
            steps.append(int(match.group(1)))
    return sorted(steps)


def list_artifacts(*, store: ArtifactStore, job: Job, base_url: str) -> Artifacts:
    checkpoints = []
    for step in _complete_steps(store):
        files = [
            ArtifactFile(
                name=name,
                size=int(str(entry.get("size", 0))),
                sha256=str(entry.get("sha256", "")),
                url=f"{base_url}/v1/jobs/{job.id}/artifacts/{step}/{name}",
            )
            for name, entry in sorted(_manifest_files(store, step).items())
        ]
        checkpoints.append(Checkpoint(step=step, files=files))
    final = None
    if JobStatus(job.status) == JobStatus.SUCCEEDED and checkpoints:
        final = checkpoints[-1].step  # the trainer's last save, after the last step
    return Artifacts(job_id=job.id, final_step=final, checkpoints=checkpoints)


def open_file(*, store: ArtifactStore, job: Job, step: int, name: str) -> Iterator[bytes]:
    """Bytes of a file that the step's manifest lists (so no other key can be named)."""
    if step not in _complete_steps(store) or name not in _manifest_files(store, step):
        raise NotFound(f"job {job.id} has no artifact {step}/{name}")
    return store.stream(f"{_step_dir(step)}/{name}")

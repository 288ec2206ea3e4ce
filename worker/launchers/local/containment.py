"""What contains a local trainer on disk: who owns which directory (docs/security.md).

A trainer runs a team's code. When the server is root it runs as its job's own unprivileged uid
(worker.launchers.identity), which owns only its working directory and the job's checkpoint
directory:

    <root>/                    0711 root          others may pass, not list
    <root>/.uids/              0700 root          which job owns which uid
    <root>/<attempt>/          0750 root:<job>    launcher state; the trainer may read, not write
    <root>/<attempt>/work/     0700 <job>:<job>   the trainer's working directory and HOME
    <checkpoints>/<job id>/    0700 <job>:<job>   a local checkpoint root's per-job prefix
    /tmp/gj-<random>/          0700 <job>:<job>   its TMPDIR, short for the sockets made there
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from gpujobs.checkpoints import LocalLocation, parse_uri
from worker.launchers.base import LaunchRequest
from worker.launchers.identity import Identity, UidRange, identity_for_job, isolating, own_tree
from worker.launchers.local import record

DEFAULT_UIDS = UidRange(first=200_000, count=100_000)
UID_REGISTRY = ".uids"  # a name no attempt id can take (LocalLauncher._dir)
# Trainers' TMPDIRs: /tmp/gj-<16 hex> is 24 characters, whatever the launcher's root.
SCRATCH_ROOT = Path("/tmp")
SCRATCH_PREFIX = "gj-"
SCRATCH_NAME_BYTES = 8


def make_root(root: Path) -> None:
    if not root.is_dir():
        root.mkdir(mode=0o711, parents=True, exist_ok=True)
        os.chmod(root, 0o711)  # trainers pass through to their own directory only


def trainer_identity(root: Path, request: LaunchRequest, uids: UidRange) -> Identity | None:
    if not isolating():
        return None  # not root: trainers run as the server's user (docs/security.md)
    return identity_for_job(root / UID_REGISTRY, job_id=request.job_id, uids=uids)


def prepare_attempt(directory: Path, identity: Identity | None) -> Path:
    """The attempt's working directory, the trainer's own; the launcher's state beside it
    stays the server's (the trainer's group may read it, not change it)."""
    work = directory / record.WORK
    work.mkdir(mode=0o700, exist_ok=True)
    if identity is not None:
        os.chown(directory, os.geteuid(), identity.gid)
        os.chmod(directory, 0o750)
        os.chown(work, identity.uid, identity.gid)
    return work


def prepare_scratch(directory: Path, identity: Identity | None) -> Path:
    """The attempt's TMPDIR, the trainer's own: short whatever the root's length, since torch
    makes sockets under it (environment.TMPDIR_MAX): `<root>/<attempt>/work/tmp` under
    /var/lib/gpujobs/<hash>/attempts is 88 characters. A fresh name in /tmp, made here, so a
    name a job left there is never taken over; recorded, so the attempt's end removes it."""
    remove_scratch(directory)  # one a launch that died before starting the trainer made
    while True:
        path = SCRATCH_ROOT / f"{SCRATCH_PREFIX}{secrets.token_hex(SCRATCH_NAME_BYTES)}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        break
    if identity is not None:
        os.chown(path, identity.uid, identity.gid)
    record.write(directory / record.SCRATCH, str(path))
    return path


def remove_scratch(directory: Path) -> None:
    """The attempt's TMPDIR, and whatever its trainer left in it. Its trainer owns it and may
    have swapped it for a link: rmtree removes no link's target and follows none inside."""
    path = record.read(directory / record.SCRATCH)
    if path is None:
        return
    if Path(path).parent == SCRATCH_ROOT and Path(path).name.startswith(SCRATCH_PREFIX):
        shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(path):
            return  # a file still being made in it: the next look removes it
    (directory / record.SCRATCH).unlink(missing_ok=True)


def prepare_checkpoints(request: LaunchRequest, identity: Identity | None) -> list[Path]:
    """A local checkpoint root gets the job's own directory under it, which only the job's
    uid can enter; the root itself lets others pass but not list. S3 needs nothing here."""
    directory = local_checkpoint_dir(request.run_config.checkpoint_uri)
    if directory is None:
        return []
    if not directory.parent.exists():
        directory.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
        os.chmod(directory.parent, 0o711)
    directory.mkdir(mode=0o700, exist_ok=True)
    if identity is not None and directory.stat().st_uid != identity.uid:
        own_tree(directory, identity)
    return [directory]


def local_checkpoint_dir(uri: str) -> Path | None:
    """The directory of a local checkpoint URI (an absolute path or file:///dir); None for S3,
    and for a URI the trainer refuses (it reports that itself)."""
    try:
        location = parse_uri(uri)
    except ValueError:
        return None
    if isinstance(location, LocalLocation) and location.directory.is_absolute():
        return location.directory
    return None


def share(path: Path, identity: Identity | None) -> None:
    """Readable by the trainer's group (its run config, its log), private to everyone else."""
    if identity is None:
        os.chmod(path, 0o600)
        return
    os.chown(path, os.geteuid(), identity.gid)
    os.chmod(path, 0o640)

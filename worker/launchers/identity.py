"""Who a trainer runs as on this machine: one unprivileged uid per job, when the server is root.

Why per job, not per team: a job's token, checkpoints and working files are its own, so a job
whose dependencies turn hostile cannot reach even its own team's other jobs, and a uid's
processes can signal or inspect only the job they belong to. Why not one uid for all trainers:
then every team could read every other team's checkpoints. Why not one per attempt: a job's
attempts share its checkpoint directory (0700), a standby beside the running attempt included.

A uid needs no passwd entry. It comes from a configured range, picked by hashing the job id and
probing: `<registry>/<uid>` holds the job id that owns it, created atomically (link of a full
temporary file), so two workers agree, a restarted worker finds the same uid, and two jobs never
share one. The gid is the same number, so group permissions give a job its own attempt
directories and nothing else. Uids are not reused: a finished job's files keep its uid, and a
process it left behind must never meet another job's files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path


class UidsExhausted(RuntimeError):
    pass


@dataclass(frozen=True)
class UidRange:
    first: int
    count: int

    def __post_init__(self) -> None:
        if self.first < 1000 or self.count < 1 or self.first + self.count > 2**31 - 1:
            raise ValueError(
                f"trainer uid range {self.first}+{self.count}: must lie in 1000..2^31-2"
            )


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int


def isolating() -> bool:
    """Only root can run trainers as other users; elsewhere they run as the server's user."""
    return os.geteuid() == 0


def identity_for_job(registry: Path, *, job_id: str, uids: UidRange) -> Identity:
    registry.mkdir(mode=0o700, parents=True, exist_ok=True)
    start = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big") % uids.count
    for probe in range(uids.count):
        uid = uids.first + (start + probe) % uids.count
        claim = registry / str(uid)
        owner = _read(claim)
        if owner is None and _claim(claim, job_id):
            return Identity(uid=uid, gid=uid)
        if (owner if owner is not None else _read(claim)) == job_id:
            return Identity(uid=uid, gid=uid)
    raise UidsExhausted(
        f"every trainer uid in {uids.first}..{uids.first + uids.count - 1} belongs to a job: "
        "widen GPUJOBS_TRAINER_UID_COUNT"
    )


def _claim(claim: Path, job_id: str) -> bool:
    fd, tmp = tempfile.mkstemp(dir=claim.parent, prefix=".claim-")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(job_id)
        os.link(tmp, claim)  # atomic, and fails if another job got there first
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return True


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def reachable(path: Path, identity: Identity) -> bool:
    """Every directory above `path` lets `identity` through (search permission)."""
    for parent in path.resolve().parents:
        try:
            st = parent.stat()
        except OSError:
            return False
        if st.st_uid == identity.uid:
            bit = stat.S_IXUSR
        elif st.st_gid == identity.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def own_tree(path: Path, identity: Identity) -> None:
    """Hand a directory tree to the job's uid, private (an earlier attempt may have run before
    isolation was on, or an operator restored it). By file descriptor and without following
    links: a process the job left behind may swap a directory for a link to elsewhere."""
    for _root, _dirs, files, fd in os.fwalk(path, follow_symlinks=False):
        os.fchown(fd, identity.uid, identity.gid)
        os.fchmod(fd, 0o700)
        for name in files:
            os.chown(name, identity.uid, identity.gid, dir_fd=fd, follow_symlinks=False)

"""How an attempt ended, and what its trainer wrote: the record's verdict and the trainer's output.

The trainer's files are a team's output, read as hostile: no link is followed, nothing but a
regular file is opened, and no read is larger than a bounded chunk (docs/security.md).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from gpujobs.logs import CHUNK_BYTES, LogChunk
from gpujobs.runtime import EXIT_CONFIG_ERROR, TERMINATION_MESSAGE_MAX_BYTES
from worker.launchers.base import Observation, ObservedState
from worker.launchers.local import record


def ended(directory: Path, ending: record.Ending) -> Observation:
    """The verdict on an attempt none of whose processes is left."""
    code = ending.exit_code
    if code == 0:  # finished before a stop took effect: the work is done either way
        return Observation(ObservedState.SUCCEEDED, exit_code=0)
    if ending.stop == "cancel":
        return Observation(ObservedState.CANCELLED, exit_code=code)
    if ending.noticed or ending.drained:
        reason = "spot capacity was reclaimed" if ending.noticed else "the worker was stopped"
        return Observation(ObservedState.PREEMPTED, exit_code=code, message=reason)
    if code is None:
        return Observation(ObservedState.LOST, message="the process group disappeared")
    reported = trainer_message(directory)
    if reported is not None:
        # The trainer said why it cannot run. Under torchrun the failed rank's 78 reaches us
        # as torchrun's own 1: the rank's message is what tells the kind of failure.
        return Observation(
            ObservedState.FAILED, exit_code=EXIT_CONFIG_ERROR, message=reported.strip()
        )
    return Observation(
        ObservedState.FAILED, exit_code=code, message=last_lines(directory / record.LOG)
    )


def read_log(path: Path, *, offset: int = 0) -> Iterator[LogChunk]:
    """The log from byte `offset` (from the end when negative) to where it ends now, in chunks
    of at most CHUNK_BYTES (api.logs.reader.LogReader): a trainer makes its log as large as it
    likes, and a reader must not hold it whole."""
    fd = open_regular(path)
    if fd is None:
        return
    try:
        end = os.fstat(fd).st_size  # what a trainer writes meanwhile is the next read's
        position = max(0, end + offset) if offset < 0 else offset
        while position < end:
            data = os.pread(fd, min(CHUNK_BYTES, end - position), position)
            if not data:
                return  # the trainer truncated its log (its stdout) meanwhile
            yield LogChunk(start=position, data=data)
            position += len(data)
    finally:
        os.close(fd)


def open_regular(path: Path) -> int | None:
    """A descriptor of the regular file at `path`, or None. The trainer's files are a team's
    output: a link is not followed (it could name a secret of the server's, or
    /proc/self/environ, which the server reads as itself), and a FIFO or device is not read
    (opening it blocks the reconciler until someone writes to it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # missing, or a link (ELOOP)
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def tail(fd: int, limit: int = TERMINATION_MESSAGE_MAX_BYTES) -> str:
    """The last `limit` bytes of an open file, as text: a failure's cause is written last."""
    end = os.fstat(fd).st_size
    return os.pread(fd, limit, max(0, end - limit)).decode("utf-8", errors="replace")


def trainer_message(directory: Path) -> str | None:
    """The trainer's termination message (why it could not run), at most
    TERMINATION_MESSAGE_MAX_BYTES of it. The trainer writes it in its own directory: only a
    regular file its own uid owns, linked nowhere else, is read. (A hard link to someone
    else's file keeps that file's owner; a kernel with fs.protected_hardlinks=0 lets any uid
    make one.)"""
    fd = open_regular(directory / record.TERMINATION_LOG)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        if info.st_uid != record.owner(directory / record.WORK) or info.st_nlink != 1:
            return None
        return tail(fd).strip()
    finally:
        os.close(fd)


def last_lines(path: Path, lines: int = 3) -> str | None:
    """The end of a failed trainer's output: usually the error that ended it."""
    fd = open_regular(path)
    if fd is None:
        return None
    try:
        text = tail(fd)
    finally:
        os.close(fd)
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept) or None

"""The launch lock: one launch per attempt, even when two workers race to it or one dies in it.

The lock is a flock on `<attempt>/launch.lock`, which the kernel drops when its holder dies: a
worker killed in the middle of a launch leaves a lock that the relaunch takes over, where a lock
file alone kept the attempt pending until it was given up as lost. The file's existence also
says that the attempt was launched here at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

LAUNCH_LOCK = "launch.lock"
LAUNCH_GRACE_S = 60.0  # longest a live launch may hold the lock without having written the pid
LOCK_WAIT_S = 2.0  # how long a launch waits for another to release the lock before leaving it


@contextlib.contextmanager
def launch_lock(directory: Path) -> Iterator[bool]:
    """Hold the attempt's launch lock; False when a live launch holds it."""
    fd = _take(directory)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def _take(directory: Path) -> int | None:
    """A descriptor holding the launch lock, or None when a live launch holds it (for longer
    than LOCK_WAIT_S: a status check holds it for a moment). The file is linked into place
    already locked, so no one finds it unheld while its creator is still about to lock it."""
    lock = directory / LAUNCH_LOCK
    fd, mine = tempfile.mkstemp(prefix=f".{LAUNCH_LOCK}.", dir=directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: no one else has it
        os.link(mine, lock)
        return fd
    except FileExistsError:
        os.close(fd)
    except BaseException:
        os.close(fd)
        raise
    finally:
        os.unlink(mine)
    fd = os.open(lock, os.O_RDONLY)
    deadline = time.monotonic() + LOCK_WAIT_S
    while not try_lock(fd):
        if time.monotonic() >= deadline:
            os.close(fd)
            return None
        time.sleep(0.05)
    return fd


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def launched_here(directory: Path) -> bool:
    """Whether the attempt was ever launched on this machine."""
    return (directory / LAUNCH_LOCK).exists()

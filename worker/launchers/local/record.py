"""The attempt's record: `<root>/<attempt id>/`, everything the local launcher knows of it.

Each file is the server's, written whole (a rename), so a restarted worker reads what a dead one
wrote. Only `work/` is the trainer's, and nothing in it is trusted (observe.py reads it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

RUN_CONFIG = "run_config.json"
LOG = "trainer.log"  # the trainer's stdout and stderr; the trainer's group may read it
PID = "pid"  # the supervisor's pid and start time (processes.record_pid)
EXIT_CODE = "exit_code"  # written by the supervisor when the trainer exits
# How many processes the supervisor killed after its trainer exited (supervise.LEFTOVERS).
LEFTOVERS = "leftovers"
KILLED = "killed"  # the pids the launcher killed (processes.record_killed)
STOP = "stop"  # why the launcher stops the attempt ("cancel")
STOP_DEADLINE = "stop_deadline"  # wall-clock time after which a stop escalates to SIGKILL
NOTICE = "notice"  # when the simulated spot market's notice was given
PREEMPT_AT = "preempt_at"  # when the simulated spot market takes the attempt's instance back
NO_CAPACITY = "no_capacity"  # why the attempt never started: no spot now
DRAINED = "drained"  # the worker stopped the attempt on its way out (LocalLauncher.drain)
WORK = "work"  # the trainer's own directory
SCRATCH = "scratch"  # where its TMPDIR is (outside: containment.prepare_scratch)
# In the trainer's own directory: it runs as the job's uid and writes nowhere else here.
TERMINATION_LOG = "work/termination-log"


@dataclass(frozen=True)
class Ending:
    """What the record says of an attempt's end, read before its processes are looked at: an
    exit code read after would miss a trainer that exits in between."""

    exit_code: int | None
    stop: str | None
    noticed: bool  # the spot market's notice was given
    drained: bool  # the worker's own shutdown stopped it

    @classmethod
    def read(cls, directory: Path) -> Ending:
        return cls(
            exit_code=read_int(directory / EXIT_CODE),
            stop=read(directory / STOP),
            noticed=(directory / NOTICE).exists(),
            drained=(directory / DRAINED).exists(),
        )


def write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read(path: Path) -> str | None:
    """A file of the launcher's own, which no trainer can write."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def read_int(path: Path) -> int | None:
    text = read(path)
    return int(text) if text not in (None, "") else None


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except FileNotFoundError:
        return None

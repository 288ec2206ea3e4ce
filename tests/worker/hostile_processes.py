"""A hostile workload that attacks the machine's processes, or the way its end is read.

`HOSTILE_PROCESSES` (spec.env) names the attack:

- `exit`: exit at once with `HOSTILE_EXIT_CODE`, e.g. 75, what a trainer exits with after a
  preemption notice, when no notice was given: a job that wants to be read as preempted (no
  restart spent, its pool learned as unreliable by every team's quotes).
- `forkbomb`: fork children that only wait, until a fork fails or `HOSTILE_FORKS` of them run
  (a ceiling, so that the test never takes the machine's last pid when no limit holds); then
  write what happened to `forkbomb.json` in its working directory (HOME) and exit 1, leaving the
  children behind for the launcher to kill.

It takes no options.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from trainer.workloads import Workload

REPORT = "forkbomb.json"


def _forkbomb(ceiling: int) -> dict[str, Any]:
    children = 0
    error = None
    while children < ceiling:
        try:
            pid = os.fork()
        except OSError as exc:
            error = exc.errno
            break
        if pid == 0:
            while True:  # holds its pid until the launcher kills it
                signal.pause()
        children += 1
    return {"children": children, "errno": error, "uid": os.getuid()}


def build(args: dict[str, Any]) -> Workload:
    attack = os.environ["HOSTILE_PROCESSES"]
    if attack == "exit":
        os._exit(int(os.environ["HOSTILE_EXIT_CODE"]))
    if attack == "forkbomb":
        report = _forkbomb(int(os.environ["HOSTILE_FORKS"]))
        path = os.path.join(os.environ["HOME"], REPORT)  # its working directory
        with open(f"{path}.tmp", "w") as out:
            json.dump(report, out)
        os.replace(f"{path}.tmp", path)  # the test reads it whole
        os._exit(1)
    raise ValueError(f"unknown attack {attack!r}")

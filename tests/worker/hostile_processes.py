"""A hostile workload that attacks the machine's processes, or the way its end is read.

`HOSTILE_PROCESSES` (spec.env) names the attack:

- `exit`: exit at once with `HOSTILE_EXIT_CODE`, e.g. 75, what a trainer exits with after a
  preemption notice, when no notice was given: a job that wants to be read as preempted (no
  restart spent, its pool learned as unreliable by every team's quotes).
- `forkbomb`: fork children that only wait, until a fork fails or `HOSTILE_FORKS` of them run
  (a ceiling, so that the test never takes the machine's last pid when no limit holds); then
  write what happened to `forkbomb.json` in its working directory (HOME) and exit 1, leaving the
  children behind for the launcher to kill.
- `leftover`: leave a writer behind that the launcher's search by directory and environment
  cannot find, then wait for the stop's notice and exit 75 as a checkpointed trainer does. The
  writer leads a session of its own (a double fork), ignores SIGTERM, works in the job's
  checkpoint directory with an empty environment, writes its pid and start time to
  `LEFTOVER_PID` there, and appends a line to `LEFTOVER_LOG` there every few milliseconds for
  as long as it lives. A standby attempt (its run config says so) only waits to be stopped.

It takes no options.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from gpujobs.runtime import ENV_RUN_CONFIG
from trainer.workloads import Workload

REPORT = "forkbomb.json"
LEFTOVER_PID = "leftover.pid"
LEFTOVER_LOG = "leftover.log"
# The writer, run with `python -c` so that its environment is its own (empty): argv[1] is the
# log; its start time is read from /proc so the test tells it from a reused pid.
WRITER = """
import os, sys, time
stat = open("/proc/self/stat").read()
start = stat[stat.rindex(")") + 2 :].split()[19]
with open("leftover.pid.tmp", "w") as out:
    out.write(f"{os.getpid()} {start}")
os.replace("leftover.pid.tmp", "leftover.pid")
while True:
    with open(sys.argv[1], "a") as log:
        log.write(f"{time.time()}\\n")
    time.sleep(0.01)
"""


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


def _leave_a_writer(directory: str) -> None:
    if os.fork() != 0:
        os.wait()  # the middle child exits at once: the writer is orphaned
        return
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec
    os.chdir(directory)
    os.execve(sys.executable, [sys.executable, "-I", "-c", WRITER, LEFTOVER_LOG], {})


def _leftover() -> None:
    with open(os.environ[ENV_RUN_CONFIG]) as config_file:
        config = json.load(config_file)
    if not config["standby"]:
        _leave_a_writer(config["checkpoint_uri"])
    signal.signal(signal.SIGTERM, lambda *_: os._exit(75))  # "checkpointed" on the notice
    while True:
        signal.pause()


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
    if attack == "leftover":
        _leftover()
    raise ValueError(f"unknown attack {attack!r}")

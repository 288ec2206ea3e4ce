"""An attempt's processes: its supervisor's process group, the signals sent to it, and every
other process of the attempt, wherever it went in the process tree.

The supervisor (worker.launchers.supervise) leads a session of its own and runs the trainer in
it; its pid and start time are in the record (`pid`), so any worker tells it from a reused pid.
It is the subreaper of everything the trainer starts: every process of the attempt is its
descendant, whatever session it made itself or wherever it went, and the supervisor outlives
them all (it ignores SIGTERM, and the launcher's SIGKILL spares it) to kill what is left and
record its verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

from gpujobs.runtime import ENV_RUN_CONFIG
from worker.launchers import supervise
from worker.launchers.local import record

SUPERVISOR = "worker.launchers.supervise"
STRAGGLERS_EXIT_S = 5.0  # how long a relaunch waits for a dead launch's processes to go


class ProcessGroups:
    """The attempts' process groups, and the supervisors this worker started (its children)."""

    def __init__(self) -> None:
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def adopt(self, attempt_id: str, child: subprocess.Popen[bytes]) -> None:
        self._children[attempt_id] = child

    def reap(self) -> None:
        """Collect our exited children: the exit status is on disk, and a finished attempt must
        not stay a zombie (its group would look alive) for as long as this worker lives."""
        for attempt_id, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[attempt_id]

    def alive(self, directory: Path) -> bool:
        child = self._children.get(directory.name)
        if child is not None and child.poll() is not None:
            return False  # reaped: our own child has exited
        pid_file = record.read(directory / record.PID)
        if pid_file is None:
            return False
        recorded = json.loads(pid_file)
        if recorded["pid"] is None:
            return False  # it ran and ended before its launch was recorded (Launcher._launched)
        started = start_time(recorded["pid"])
        return started is not None and started == recorded["start"]

    def signal(self, directory: Path, sig: signal.Signals) -> None:
        """To every process of the attempt: its group, and whatever left the group under the
        supervisor. SIGKILL spares the supervisor, which then kills what is left and records
        the exit status; the processes it kills are recorded (`killed`)."""
        pid_file = record.read(directory / record.PID)
        if pid_file is None or not self.alive(directory):
            if sig == signal.SIGKILL:
                kill_stragglers(directory)
            return
        leader = json.loads(pid_file)["pid"]
        targets = {pid for pid, _ in supervise.descendants(leader)}
        if sig == signal.SIGKILL:
            targets.update(pid for pid in group_members(leader) if pid != leader)
            killed = [pid for pid in sorted(targets) if _kill(pid, sig)]
            record_killed(directory, killed)
            kill_stragglers(directory)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader, sig)
        for pid in targets:
            _kill(pid, sig)


def record_pid(directory: Path, pid: int) -> None:
    record.write(directory / record.PID, json.dumps({"pid": pid, "start": start_time(pid)}))


def record_no_pid(directory: Path) -> None:
    """The attempt ran and ended before its launch was recorded."""
    record.write(directory / record.PID, json.dumps({"pid": None, "start": None}))


def supervisor(directory: Path) -> int | None:
    """The attempt's supervisor: it leads its own process group, runs as the server's user
    (a trainer runs as its job's), and names the attempt's exit file."""
    exit_file = str(directory / record.EXIT_CODE).encode()
    for pid in attempt_processes(directory):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            owner = os.stat(f"/proc/{pid}").st_uid
            leads = os.getpgid(pid) == pid
        except (OSError, ProcessLookupError):
            continue
        if leads and owner == os.geteuid() and args[3:5] == [SUPERVISOR.encode(), exit_file]:
            return pid
    return None


def kill_stragglers(directory: Path) -> None:
    record_killed(directory, [pid for pid in attempt_processes(directory) if _kill(pid)])


def _kill(pid: int, sig: signal.Signals = signal.SIGKILL) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def record_killed(directory: Path, pids: list[int]) -> None:
    """Add to the processes the launcher had to kill (pids, one a line): the attempt's end
    says so (`killed`)."""
    if not pids:
        return
    before = (record.read(directory / record.KILLED) or "").split()
    record.write(directory / record.KILLED, "\n".join(sorted({*before, *map(str, pids)})))


def killed(directory: Path) -> int:
    """How many of the attempt's processes were killed rather than let exit: by the launcher
    once a stop's notice had run out or its trainer had exited, or by its supervisor after
    its trainer had exited."""
    by_launcher = len((record.read(directory / record.KILLED) or "").split())
    return by_launcher + (record.read_int(directory / record.LEFTOVERS) or 0)


def group_members(group: int) -> list[int]:
    """The live processes of a process group."""
    return [pid for pid, fields in supervise.live_processes() if int(fields[2]) == group]


def attempt_processes(directory: Path) -> list[int]:
    """Every live process of the attempt, wherever it is in the process tree: they all
    start in the attempt's directory (or its work/) with its run config in their
    environment, and keep both when they leave the group (torchrun's ranks) or are
    orphaned.

    Only processes the attempt's own uids run count (they keep it open, and billed): its
    supervisor, the server's, which only root or the server can start in the attempt's
    directory; and its trainers, the job's uid (the owner of work/). Any uid can put the
    run config's path, which every command line shows, into its own environment: another
    job's process that does must not keep this attempt running, nor be killed with it.
    When the server is not root, every trainer is the server's user (docs/security.md)."""
    server = os.geteuid()
    job = record.owner(directory / record.WORK)  # chowned to the job's uid at launch
    run_config = f"{ENV_RUN_CONFIG}={directory / record.RUN_CONFIG}".encode()
    homes = (str(directory), str(directory / record.WORK))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = real_uid(entry)
            if uid not in (server, job):
                continue
            in_directory = os.readlink(entry / "cwd") in homes
            if not in_directory and (
                uid != job or run_config not in (entry / "environ").read_bytes()
            ):
                continue
        except OSError:
            continue  # gone meanwhile
        if start_time(int(entry.name)) is not None:  # zombies have exited
            found.append(int(entry.name))
    return found


def start_time(pid: int) -> str | None:
    """The process's start time (from /proc): tells a live process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # a zombie has exited
    return fields[19]


def real_uid(process: Path) -> int:
    """Who runs a process (/proc/<pid>): its real uid. Not the owner of the files in
    /proc/<pid>, which are root's for any process that makes itself undumpable."""
    for line in (process / "status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise OSError(f"{process}/status names no uid")

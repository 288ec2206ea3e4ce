"""Run a command and record its exit status in a file, surviving the launcher's own death.

The local launcher starts `python -I -m worker.launchers.supervise EXIT_FILE [OPTIONS] -- CMD...`
in a new process group. Signals for the group (the preemption notice, a cancel) reach the command
directly; the supervisor ignores SIGTERM so that it outlives the command and can write its exit
status, which the launcher reads even after a restart.

With `--uid N --gid N` (the server runs as root) the supervisor stays root, so it can write the
exit status where the trainer cannot, and the command runs as that unprivileged user: no
supplementary groups, umask 077. `--max-pids N` bounds that user's processes and threads
(RLIMIT_NPROC, which the kernel counts per uid: the bound holds for all of the job's
processes together, however they fork); a fork past it fails with EAGAIN in the job.
`--writable DIR` names a directory the command must be able to write as that user (its
working directory, its checkpoints): checked after dropping privileges, before exec, so a
deployment that hides them (a 0700 parent) fails at once with a message that says which,
instead of deep inside the trainer. A command that cannot start at all records
EX_CONFIG (78): retrying cannot help.

Nothing of the attempt outlives its supervisor's verdict: the supervisor is a child subreaper
(PR_SET_CHILD_SUBREAPER), so a process the command leaves behind stays its descendant whatever
it does (a new session, another directory, a cleared environment, SIGTERM ignored), where the
launcher's search by directory and environment loses it. When the command has exited, every
descendant left is killed and reaped, and how many were written to `leftovers` beside the exit
file, before the exit status: the attempt reads as over only once nothing of it runs. Without
that, a released attempt's helper kept writing into the job's checkpoints after its standby
had taken over (issue 36).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

EX_CONFIG = 78  # gpujobs.runtime.EXIT_CONFIG_ERROR; the supervisor imports nothing of ours
LEFTOVERS = "leftovers"  # worker.launchers.local.record.LEFTOVERS, beside the exit file
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
HINT = (
    "Trainers run as an unprivileged uid: every directory above the interpreter "
    "(GPUJOBS_TRAINER_PYTHON), GPUJOBS_HOME and the checkpoint root must let other users pass "
    "(o+x); see docs/security.md"
)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(
            "usage: supervise EXIT_FILE [--uid N --gid N] [--max-pids N] [--workdir DIR] "
            "[--writable DIR]... -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="supervise")
    parser.add_argument("exit_file", type=Path)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument("--max-pids", type=int)
    parser.add_argument("--workdir", help="the command's working directory")
    parser.add_argument("--writable", action="append", default=[])
    options = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command or (options.uid is None) != (options.gid is None):
        parser.error("a command, and --uid with --gid or neither")
    if options.max_pids is not None and options.uid is None:
        # RLIMIT_NPROC counts every process of the uid: as the server's own, the server's too.
        parser.error("--max-pids bounds a trainer's own uid: it needs --uid")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _become_subreaper()
    code = _run(
        command,
        uid=options.uid,
        gid=options.gid,
        max_pids=options.max_pids,
        workdir=options.workdir,
        writable=options.writable,
    )
    killed = _kill_descendants()
    if killed:
        _write(options.exit_file.with_name(LEFTOVERS), str(killed))
    _write(options.exit_file, str(code))
    return 0


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _kill_descendants() -> int:
    """Kill and reap every process left under this one; returns how many were killed. Each
    orphan is reparented to us (the subreaper), so once no child is left none of the command's
    processes is: one forked after a look is found by the next."""
    killed: set[tuple[int, str]] = set()
    while True:
        for pid, started in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.add((pid, started))
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return len(killed)


def live_processes() -> list[tuple[int, list[str]]]:
    """Every process that has not exited (zombies left out: they only wait to be reaped), with
    the fields of its /proc stat after its name (state, ppid, pgrp, ..., start time at 19)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            found.append((int(entry), fields))
    return found


def descendants(root: int) -> list[tuple[int, str]]:
    """The live processes under `root`, each with its start time (a pid may be reused)."""
    children: dict[int, list[tuple[int, str]]] = {}
    for pid, fields in live_processes():
        children.setdefault(int(fields[1]), []).append((pid, fields[19]))
    found: list[tuple[int, str]] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child[0])
    return found


def _run(
    command: list[str],
    *,
    uid: int | None,
    gid: int | None,
    max_pids: int | None,
    workdir: str | None,
    writable: list[str],
) -> int:
    def prepare() -> None:
        # Ignored dispositions are inherited across exec: give the command the default back.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if max_pids is not None:
            # Run after the switch to the job's uid (an unprivileged process may lower its own
            # limits, never raise them again), before exec: everything the job starts inherits it.
            resource.setrlimit(resource.RLIMIT_NPROC, (max_pids, max_pids))
        needs = [(command[0], os.X_OK, "run"), *((d, os.W_OK | os.X_OK, "write") for d in writable)]
        for path, mode, verb in needs:
            if not os.access(path, mode):
                os.write(2, f"gpujobs: uid {os.getuid()} cannot {verb} {path}. {HINT}\n".encode())
                raise PermissionError(path)

    try:
        if uid is None or gid is None:
            child = subprocess.Popen(command, cwd=workdir, preexec_fn=prepare)
        else:
            child = subprocess.Popen(
                command,
                cwd=workdir,
                preexec_fn=prepare,
                user=uid,
                group=gid,
                extra_groups=[],
                umask=0o077,
            )
    except subprocess.SubprocessError:  # prepare() refused, and said why
        return EX_CONFIG
    except OSError as exc:
        print(f"gpujobs: cannot start {command[0]}: {exc}. {HINT}", file=sys.stderr)
        return EX_CONFIG
    while True:  # orphans of the command are ours to reap meanwhile (we are their subreaper)
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # the command was reaped already: cannot happen, but no hang
            return child.wait()
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

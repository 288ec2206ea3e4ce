"""The local launcher: each attempt is a process group on this machine (the embedded default).

An attempt lives in `<root>/<attempt id>/`: its run config, log, pid, exit status, and the
notes that explain how it ended (a cancel, a spot preemption notice). Everything the launcher
knows is on disk, so a restarted worker picks up attempts that a dead one started. Spot attempts
go through a simulated market: the preemption notice is SIGTERM to the group (the trainer
checkpoints and exits 75), then SIGKILL after the notice period.

A trainer runs a team's code, so it is contained (docs/security.md): its environment is built
from an allowlist (`environment.trainer_environment`), it works in `<attempt>/work/`, and when
the server is root it runs as its job's own unprivileged uid (`identity`), which owns only that
directory and the job's checkpoint directory:

    <root>/                    0711 root          others may pass, not list
    <root>/.uids/              0700 root          which job owns which uid
    <root>/<attempt>/          0750 root:<job>    launcher state; the trainer may read, not write
    <root>/<attempt>/work/     0700 <job>:<job>   the trainer's working directory and HOME
    <checkpoints>/<job id>/    0700 <job>:<job>   a local checkpoint root's per-job prefix
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from api.logs.reader import CHUNK_BYTES, LogChunk
from gpujobs.checkpoints import LocalLocation, parse_uri
from gpujobs.runtime import (
    ENV_RUN_CONFIG,
    ENV_TERMINATION_LOG,
    EXIT_CONFIG_ERROR,
    TERMINATION_MESSAGE_MAX_BYTES,
)
from gpujobs.spec import CapacityType
from worker.launchers.base import LaunchRequest, Observation, ObservedState
from worker.launchers.environment import Host, S3Credentials, trainer_environment
from worker.launchers.identity import (
    Identity,
    UidRange,
    identity_for_job,
    isolating,
    own_tree,
)
from worker.launchers.spot_market import SpotMarket

PREFIX = "local:"
# In the trainer's own directory: it runs as the job's uid and writes nowhere else here.
TERMINATION_LOG = "work/termination-log"
STOP_DEADLINE = "stop_deadline"  # wall-clock time after which a stop escalates to SIGKILL
LAUNCH_LOCK = "launch.lock"
LAUNCH_GRACE_S = 60.0  # longest a live launch may hold the lock without having written the pid
LOCK_WAIT_S = 2.0  # how long a launch waits for another to release the lock before leaving it
STRAGGLERS_EXIT_S = 5.0  # how long a relaunch waits for a dead launch's processes to go
SUPERVISOR = "worker.launchers.supervise"
DEFAULT_UIDS = UidRange(first=200_000, count=100_000)
UID_REGISTRY = ".uids"  # a name no attempt id can take (see _dir)


class LocalLauncher:
    name = "local"

    def __init__(
        self,
        *,
        root: Path,
        market: SpotMarket | None = None,
        notice_s: float = 10.0,
        python: str = sys.executable,
        clock: Callable[[], float] = time.time,
        trainer_python: str | None = None,
        python_path: str = "",
        s3: S3Credentials | None = None,
        uids: UidRange = DEFAULT_UIDS,
        server_environ: Mapping[str, str] | None = None,
    ) -> None:
        # Absolute: the supervisor and the trainer run in other directories.
        self.root = Path(
            root
        ).absolute()  # created by the first launch: readers may mount it read-only
        self.market = market
        self.notice_s = notice_s
        self.python = python  # runs the supervisor, as the server's user
        # Runs the trainer, as the job's uid when isolating: it must be installed where an
        # unprivileged user can reach it (not under a 0700 /root).
        self.trainer_python = trainer_python or python
        self.python_path = python_path  # the operator's directories of allowed workload modules
        self.s3 = s3
        self.uids = uids
        self.server_environ = os.environ if server_environ is None else server_environ
        self.clock = clock
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # The launcher interface ------------------------------------------------------------------

    def spot_available(self) -> bool | None:
        return None if self.market is None else self.market.available(self.clock())

    def launch(self, request: LaunchRequest) -> str:
        self._reap()
        handle = PREFIX + request.attempt_id
        directory = self._dir(handle)
        self._make_root()
        directory.mkdir(mode=0o700, exist_ok=True)
        # One launch per attempt, even when two workers race to it or one dies in the middle.
        with self._launch_lock(directory) as ours:
            if ours and not self._launched(directory):
                self._start(request, directory)
        return handle

    def _start(self, request: LaunchRequest, directory: Path) -> None:
        now = self.clock()
        spot = request.placement.capacity_type == CapacityType.SPOT and self.market is not None
        if spot and self.market is not None and not self.market.available(now):
            _write(directory / "no_capacity", "the simulated spot market has no capacity now")
            return
        if spot and self.market is not None:
            at = self.market.preemption_time(now=now, attempt_id=request.attempt_id)
            if at is not None:
                _write(directory / "preempt_at", repr(at))
        identity = self._identity(request)
        work = self._prepare_attempt(directory, identity)
        config = directory / "run_config.json"
        _write(config, request.run_config.model_dump_json(indent=2))
        _share(config, identity)
        env = trainer_environment(
            request,
            run_config={
                ENV_RUN_CONFIG: str(config),
                ENV_TERMINATION_LOG: str(directory / TERMINATION_LOG),
            },
            home=str(work),
            s3=self.s3,
            host=Host(
                server_environ=self.server_environ,
                bin_dir=str(Path(self.trainer_python).parent),
                python_path=self.python_path,
            ),
        )
        writable = [work, *self._prepare_checkpoints(request, identity)]
        confine = [] if identity is None else [f"--uid={identity.uid}", f"--gid={identity.gid}"]
        # The supervisor may stay root: -I keeps the trainer's PYTHON* variables and any
        # directory the job can write off its import path.
        command = [
            self.python, "-I", "-m", SUPERVISOR, str(directory / "exit_code"),
            *confine, f"--workdir={work}", *(f"--writable={path}" for path in writable), "--",
            *self._trainer_command(request),
        ]  # fmt: skip
        log_path = directory / "trainer.log"
        with open(log_path, "ab") as log:
            _share(log_path, identity)
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=directory,
                env=env,
                start_new_session=True,
            )
        self._children[request.attempt_id] = process
        _record_pid(directory, process.pid)

    def status(self, handle: str) -> Observation:
        self._reap()
        directory = self._dir(handle)
        if not (directory / LAUNCH_LOCK).exists():
            return Observation(ObservedState.LOST, message="no such attempt on this machine")
        if not (directory / "pid").exists():
            unlaunched = self._unlaunched(directory)
            if unlaunched is not None:
                return unlaunched
        if (directory / "no_capacity").exists():
            return Observation(ObservedState.NO_CAPACITY, message=_read(directory / "no_capacity"))
        code = _read_int(directory / "exit_code")
        stop = _read(directory / "stop")
        noticed = (directory / "notice").exists()
        drained = (directory / "drained").exists()  # see drain()
        if code is None and self._alive(directory):
            self._deliver_market(directory)
            self._enforce_stop(directory)
            return Observation(ObservedState.RUNNING)
        if self._processes(directory):
            # The supervisor is done but some of the attempt's processes are not (a rank in a
            # session of its own): the attempt is not over, and stays billed, until they are.
            if code is not None or (directory / STOP_DEADLINE).exists():
                self._kill_stragglers(directory)
            return Observation(ObservedState.RUNNING, message="waiting for processes to exit")
        if code == 0:  # finished before a stop took effect: the work is done either way
            return Observation(ObservedState.SUCCEEDED, exit_code=0)
        if stop == "cancel":
            return Observation(ObservedState.CANCELLED, exit_code=code)
        if noticed or drained:
            reason = "spot capacity was reclaimed" if noticed else "the worker was stopped"
            return Observation(ObservedState.PREEMPTED, exit_code=code, message=reason)
        if code is None:
            return Observation(ObservedState.LOST, message="the process group disappeared")
        reported = _trainer_message(directory)
        if reported is not None:
            # The trainer said why it cannot run. Under torchrun the failed rank's 78 reaches us
            # as torchrun's own 1: the rank's message is what tells the kind of failure.
            return Observation(
                ObservedState.FAILED, exit_code=EXIT_CONFIG_ERROR, message=reported.strip()
            )
        return Observation(
            ObservedState.FAILED, exit_code=code, message=_last_lines(directory / "trainer.log")
        )

    def cancel(self, handle: str) -> None:
        directory = self._dir(handle)
        if not (directory / LAUNCH_LOCK).exists():
            return
        if _read(directory / "stop") is None:
            _write(directory / "stop", "cancel")
        if not (directory / STOP_DEADLINE).exists():
            # On disk, so a worker that restarts after a crash still escalates on time.
            _write(directory / STOP_DEADLINE, repr(self.clock() + self.notice_s))
        self._signal(directory, signal.SIGTERM)
        self._enforce_stop(directory)

    def drain(self, *, timeout_s: float | None = None) -> list[str]:
        """This machine is going away (its worker container is stopping): give every running
        attempt the preemption notice (SIGTERM, so it checkpoints), wait up to `timeout_s`
        (default: the notice period) for them to exit, then SIGKILL what is left. A drained
        attempt reads as PREEMPTED, like a spot notice: its job resumes from the checkpoint once
        a worker is back, without spending a restart. Attempts already being stopped (a cancel,
        a migration) keep their own meaning. Returns the drained handles."""
        draining: list[Path] = []
        for directory in sorted(self.root.glob("*/")) if self.root.is_dir() else []:
            if _read(directory / "stop") is not None or not self._alive(directory):
                continue
            if _read_int(directory / "exit_code") is not None:
                continue
            _write(directory / "drained", repr(self.clock()))
            self._signal(directory, signal.SIGTERM)
            draining.append(directory)
        deadline = time.monotonic() + (self.notice_s if timeout_s is None else timeout_s)
        while time.monotonic() < deadline and any(self._alive(d) for d in draining):
            time.sleep(0.2)
        for directory in draining:
            self._signal(directory, signal.SIGKILL)  # a no-op for those that have exited
        return [PREFIX + directory.name for directory in draining]

    def logs(self, handle: str, *, follow: bool = False) -> Iterator[str]:
        """The trainer's output as text, a bounded chunk at a time (read_log); following, each
        pass reads only what came after the last."""
        directory = self._dir(handle)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        position = 0
        while True:
            for chunk in self.read_log(handle, offset=position):
                position = chunk.start + len(chunk.data)
                if text := decoder.decode(chunk.data):
                    yield text
            if follow and self._alive(directory):
                time.sleep(0.5)
            elif not follow or _size(directory / "trainer.log") <= position:
                break
        if rest := decoder.decode(b"", final=True):
            yield rest

    def read_log(self, handle: str, *, offset: int = 0) -> Iterator[LogChunk]:
        """The attempt's log from byte `offset` (from the end when negative) to where it ends
        now, in chunks of at most CHUNK_BYTES (api.logs.reader.LogReader): a trainer makes its
        log as large as it likes, and a reader must not hold it whole."""
        fd = _open_regular(self._dir(handle) / "trainer.log")
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

    # Internals ---------------------------------------------------------------------------------

    def _dir(self, handle: str) -> Path:
        if not handle.startswith(PREFIX):
            raise ValueError(f"not a local launcher handle: {handle!r}")
        attempt_id = handle[len(PREFIX) :]
        if not attempt_id or "/" in attempt_id or attempt_id.startswith("."):
            raise ValueError(f"bad attempt id in handle {handle!r}")
        return self.root / attempt_id

    def _make_root(self) -> None:
        if not self.root.is_dir():
            self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
            os.chmod(self.root, 0o711)  # trainers pass through to their own directory only

    def _identity(self, request: LaunchRequest) -> Identity | None:
        if not isolating():
            return None  # not root: trainers run as the server's user (docs/security.md)
        return identity_for_job(self.root / UID_REGISTRY, job_id=request.job_id, uids=self.uids)

    def _prepare_attempt(self, directory: Path, identity: Identity | None) -> Path:
        """The attempt's working directory, the trainer's own; the launcher's state beside it
        stays the server's (the trainer's group may read it, not change it)."""
        work = directory / "work"
        work.mkdir(mode=0o700, exist_ok=True)
        if identity is not None:
            os.chown(directory, os.geteuid(), identity.gid)
            os.chmod(directory, 0o750)
            os.chown(work, identity.uid, identity.gid)
        return work

    def _prepare_checkpoints(self, request: LaunchRequest, identity: Identity | None) -> list[Path]:
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

    def _trainer_command(self, request: LaunchRequest) -> list[str]:
        processes = request.placement.nodes * request.gpus_per_node
        if processes == 1:
            return [self.trainer_python, "-m", "trainer"]
        return [
            self.trainer_python, "-m", "torch.distributed.run", "--nnodes=1",
            f"--nproc_per_node={processes}", "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}", "-m", "trainer",
        ]  # fmt: skip

    @contextlib.contextmanager
    def _launch_lock(self, directory: Path) -> Iterator[bool]:
        """Hold the attempt's launch lock; False when a live launch holds it.

        The lock is a flock on `launch.lock`, which the kernel drops when its holder dies: a
        worker killed in the middle of a launch leaves a lock that the relaunch takes over,
        where a lock file alone kept the attempt pending until it was given up as lost."""
        fd = _take_launch_lock(directory)
        try:
            yield fd is not None
        finally:
            if fd is not None:
                os.close(fd)

    def _launched(self, directory: Path) -> bool:
        """Whether an earlier launch of the attempt got far enough to keep; under the lock.

        A launch killed after starting the supervisor but before recording its pid left a
        trainer running that nothing watches: record it rather than start a second one, or
        let it be lost. Whatever else such a launch left running is killed."""
        if (directory / "pid").exists() or (directory / "no_capacity").exists():
            return True
        supervisor = self._supervisor(directory)
        if supervisor is not None:
            _record_pid(directory, supervisor)
            return True
        if (directory / "exit_code").exists():  # it even finished while no worker watched
            _write(directory / "pid", json.dumps({"pid": None, "start": None}))
            return True
        self._kill_stragglers(directory)
        deadline = time.monotonic() + STRAGGLERS_EXIT_S
        while self._processes(directory) and time.monotonic() < deadline:
            time.sleep(0.05)  # their GPU memory is free once they are gone
        return False

    def _unlaunched(self, directory: Path) -> Observation | None:
        """The attempt has no pid recorded: PENDING while a live worker launches it; LOST when
        that worker hangs past the grace, or died and left nothing to adopt; None when it died
        after starting the trainer, which is now recorded (_launched)."""
        never = Observation(ObservedState.LOST, message="the launch never completed")
        try:
            fd = os.open(directory / LAUNCH_LOCK, os.O_RDONLY)
        except FileNotFoundError:
            return never
        try:
            if not _try_lock(fd):
                if time.time() - os.fstat(fd).st_mtime > LAUNCH_GRACE_S:
                    return never
                return Observation(ObservedState.PENDING)
            return None if self._launched(directory) else never
        finally:
            os.close(fd)

    def _supervisor(self, directory: Path) -> int | None:
        """The attempt's supervisor: it leads its own process group, runs as the server's user
        (a trainer runs as its job's), and names the attempt's exit file."""
        exit_file = str(directory / "exit_code").encode()
        for pid in self._processes(directory):
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                owner = os.stat(f"/proc/{pid}").st_uid
                leads = os.getpgid(pid) == pid
            except (OSError, ProcessLookupError):
                continue
            if leads and owner == os.geteuid() and args[3:5] == [SUPERVISOR.encode(), exit_file]:
                return pid
        return None

    def _reap(self) -> None:
        """Collect our exited children: the exit status is on disk, and a finished attempt must
        not stay a zombie (its group would look alive) for as long as this worker lives."""
        for attempt_id, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[attempt_id]

    def _alive(self, directory: Path) -> bool:
        child = self._children.get(directory.name)
        if child is not None and child.poll() is not None:
            return False  # reaped: our own child has exited
        pid_file = _read(directory / "pid")
        if pid_file is None:
            return False
        recorded = json.loads(pid_file)
        if recorded["pid"] is None:
            return False  # it ran and ended before its launch was recorded (_launched)
        started = _start_time(recorded["pid"])
        return started is not None and started == recorded["start"]

    def _deliver_market(self, directory: Path) -> None:
        """The market's notice: SIGTERM when the instance is taken, SIGKILL after the notice."""
        at = _read(directory / "preempt_at")
        if at is None or self.clock() < float(at):
            return
        notice = _read(directory / "notice")
        if notice is None:
            _write(directory / "notice", repr(self.clock()))
            self._signal(directory, signal.SIGTERM)
        elif self.clock() - float(notice) > self.notice_s:
            self._signal(directory, signal.SIGKILL)

    def _enforce_stop(self, directory: Path) -> None:
        """A stop's escalation: SIGKILL once its persisted deadline has passed. Any worker
        process does it, on any status() or cancel() after the deadline, so it survives the
        death of the one that sent the SIGTERM."""
        deadline = _read(directory / STOP_DEADLINE)
        if deadline is not None and self.clock() >= float(deadline):
            self._signal(directory, signal.SIGKILL)

    def _kill_stragglers(self, directory: Path) -> None:
        for pid in self._processes(directory):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _processes(self, directory: Path) -> list[int]:
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
        job = _owner(directory / "work")  # chowned to the job's uid at launch
        run_config = f"{ENV_RUN_CONFIG}={directory / 'run_config.json'}".encode()
        homes = (str(directory), str(directory / "work"))
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                uid = _real_uid(entry)
                if uid not in (server, job):
                    continue
                in_directory = os.readlink(entry / "cwd") in homes
                if not in_directory and (
                    uid != job or run_config not in (entry / "environ").read_bytes()
                ):
                    continue
            except OSError:
                continue  # gone meanwhile
            if _start_time(int(entry.name)) is not None:  # zombies have exited
                found.append(int(entry.name))
        return found

    def _signal(self, directory: Path, sig: signal.Signals) -> None:
        pid_file = _read(directory / "pid")
        if pid_file is not None and self._alive(directory):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(json.loads(pid_file)["pid"], sig)
        if sig == signal.SIGKILL:
            self._kill_stragglers(directory)


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


def _share(path: Path, identity: Identity | None) -> None:
    """Readable by the trainer's group (its run config, its log), private to everyone else."""
    if identity is None:
        os.chmod(path, 0o600)
        return
    os.chown(path, os.geteuid(), identity.gid)
    os.chmod(path, 0o640)


def _take_launch_lock(directory: Path) -> int | None:
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
    while not _try_lock(fd):
        if time.monotonic() >= deadline:
            os.close(fd)
            return None
        time.sleep(0.05)
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _record_pid(directory: Path, pid: int) -> None:
    _write(directory / "pid", json.dumps({"pid": pid, "start": _start_time(pid)}))


def _start_time(pid: int) -> str | None:
    """The process's start time (from /proc): tells a live process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # a zombie has exited
    return fields[19]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _read(path: Path) -> str | None:
    """A file of the launcher's own, which no trainer can write."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _open_regular(path: Path) -> int | None:
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


def _tail(fd: int, limit: int = TERMINATION_MESSAGE_MAX_BYTES) -> str:
    """The last `limit` bytes of an open file, as text: a failure's cause is written last."""
    end = os.fstat(fd).st_size
    return os.pread(fd, limit, max(0, end - limit)).decode("utf-8", errors="replace")


def _trainer_message(directory: Path) -> str | None:
    """The trainer's termination message (why it could not run), at most
    TERMINATION_MESSAGE_MAX_BYTES of it. The trainer writes it in its own directory: only a
    regular file its own uid owns, linked nowhere else, is read. (A hard link to someone
    else's file keeps that file's owner; a kernel with fs.protected_hardlinks=0 lets any uid
    make one.)"""
    fd = _open_regular(directory / TERMINATION_LOG)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        if info.st_uid != _owner(directory / "work") or info.st_nlink != 1:
            return None
        return _tail(fd).strip()
    finally:
        os.close(fd)


def _last_lines(path: Path, lines: int = 3) -> str | None:
    """The end of a failed trainer's output: usually the error that ended it."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        tail = _tail(fd)
    finally:
        os.close(fd)
    kept = [line.rstrip() for line in tail.splitlines() if line.strip()][-lines:]
    return "\n".join(kept) or None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except FileNotFoundError:
        return None


def _real_uid(process: Path) -> int:
    """Who runs a process (/proc/<pid>): its real uid. Not the owner of the files in
    /proc/<pid>, which are root's for any process that makes itself undumpable."""
    for line in (process / "status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise OSError(f"{process}/status names no uid")


def _read_int(path: Path) -> int | None:
    text = _read(path)
    return int(text) if text not in (None, "") else None

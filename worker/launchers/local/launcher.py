"""The local launcher: each attempt is a process group on this machine (the embedded default).

An attempt lives in `<root>/<attempt id>/` (record.py): its run config, log, pid, exit status,
and the notes that explain how it ended (a cancel, a spot preemption notice). Everything the
launcher knows is on disk, so a restarted worker picks up attempts that a dead one started. Spot
attempts go through a simulated market (spot_market.py): the preemption notice is SIGTERM to the
group (the trainer checkpoints and exits 75), then SIGKILL after the notice period.

A trainer runs a team's code, so it is contained (docs/security.md): its environment is built
from an allowlist (`environment.trainer_environment`), it works in `<attempt>/work/`, and when
the server is root it runs as its job's own unprivileged uid (containment.py), whose processes
and threads are bounded (`max_pids`, RLIMIT_NPROC) so that a fork bomb cannot take the
machine's pids.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from api.launchers.local import TRAINER_MAX_PIDS
from gpujobs.logs import LogChunk
from gpujobs.runtime import ENV_RUN_CONFIG, ENV_TERMINATION_LOG
from gpujobs.spec import CapacityType
from worker.launchers.base import (
    Capability,
    LaunchRefused,
    LaunchRequest,
    Observation,
    ObservedState,
)
from worker.launchers.environment import Host, trainer_environment
from worker.launchers.identity import UidRange
from worker.launchers.local import containment, lock, observe, processes, record
from worker.launchers.local.spot_market import SpotMarket
from worker.storage_credentials import S3Credentials

PREFIX = "local:"


class LocalLauncher:
    name = "local"
    # Standby: everything of an attempt is keyed by its id (its directory, lock, log, process
    # group, market notice), never by its job's; only the job's uid and checkpoint directory are
    # shared, as the standby must read the running attempt's checkpoint.
    capabilities = frozenset(
        {
            Capability.DRAIN,
            Capability.SPOT_AVAILABILITY,
            Capability.LOG_OFFSET,
            Capability.STANDBY,
        }
    )

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
        uids: UidRange = containment.DEFAULT_UIDS,
        max_pids: int = TRAINER_MAX_PIDS,
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
        self.max_pids = max_pids  # a job uid's processes and threads (run as root)
        self.server_environ = os.environ if server_environ is None else server_environ
        self.clock = clock
        self._groups = processes.ProcessGroups()

    # The launcher interface ------------------------------------------------------------------

    def spot_available(self) -> bool | None:
        return None if self.market is None else self.market.available(self.clock())

    def launch(self, request: LaunchRequest) -> str:
        self._groups.reap()
        handle = PREFIX + request.attempt_id
        directory = self._dir(handle)
        containment.make_root(self.root)
        directory.mkdir(mode=0o700, exist_ok=True)
        # One launch per attempt, even when two workers race to it or one dies in the middle.
        with lock.launch_lock(directory) as ours:
            if ours and not self._launched(directory):
                self._start(request, directory)
        return handle

    def _start(self, request: LaunchRequest, directory: Path) -> None:
        now = self.clock()
        spot = request.placement.capacity_type == CapacityType.SPOT and self.market is not None
        if spot and self.market is not None and not self.market.available(now):
            record.write(
                directory / record.NO_CAPACITY, "the simulated spot market has no capacity now"
            )
            return
        if spot and self.market is not None:
            at = self.market.preemption_time(now=now, attempt_id=request.attempt_id)
            if at is not None:
                record.write(directory / record.PREEMPT_AT, repr(at))
        identity = containment.trainer_identity(self.root, request, self.uids)
        work = containment.prepare_attempt(directory, identity)
        scratch = containment.prepare_scratch(directory, identity)
        config = directory / record.RUN_CONFIG
        record.write(config, request.run_config.model_dump_json(indent=2))
        containment.share(config, identity)
        try:
            env = trainer_environment(
                request,
                run_config={
                    ENV_RUN_CONFIG: str(config),
                    ENV_TERMINATION_LOG: str(directory / record.TERMINATION_LOG),
                },
                home=str(work),
                tmpdir=str(scratch),
                s3=request.storage or self.s3,
                host=Host(
                    server_environ=self.server_environ,
                    bin_dir=str(Path(self.trainer_python).parent),
                    python_path=self.python_path,
                ),
            )
        except LaunchRefused:
            containment.remove_scratch(directory)  # never launched: no status will see it end
            raise
        writable = [work, scratch, *containment.prepare_checkpoints(request, identity)]
        confine = []
        if identity is not None:
            confine = [f"--uid={identity.uid}", f"--gid={identity.gid}"]
            confine.append(f"--max-pids={self.max_pids}")
        # The supervisor may stay root: -I keeps the trainer's PYTHON* variables and any
        # directory the job can write off its import path.
        command = [
            self.python, "-I", "-m", processes.SUPERVISOR, str(directory / record.EXIT_CODE),
            *confine, f"--workdir={work}", *(f"--writable={path}" for path in writable), "--",
            *self._trainer_command(request),
        ]  # fmt: skip
        log_path = directory / record.LOG
        with open(log_path, "ab") as log:
            containment.share(log_path, identity)
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=directory,
                env=env,
                start_new_session=True,
            )
        self._groups.adopt(request.attempt_id, process)
        processes.record_pid(directory, process.pid)

    def status(self, handle: str) -> Observation:
        self._groups.reap()
        directory = self._dir(handle)
        if not lock.launched_here(directory):
            return Observation(ObservedState.LOST, message="no such attempt on this machine")
        if not (directory / record.PID).exists():
            unlaunched = self._unlaunched(directory)
            if unlaunched is not None:
                return unlaunched
        if (directory / record.NO_CAPACITY).exists():
            return Observation(
                ObservedState.NO_CAPACITY, message=record.read(directory / record.NO_CAPACITY)
            )
        ending = record.Ending.read(directory)
        if ending.exit_code is None and self._groups.alive(directory):
            self._deliver_market(directory)
            self._enforce_stop(directory)
            return Observation(ObservedState.RUNNING)
        if processes.attempt_processes(directory):
            # The supervisor is done but some of the attempt's processes are not (a rank in a
            # session of its own): the attempt is not over, and stays billed, until they are.
            if ending.exit_code is not None or (directory / record.STOP_DEADLINE).exists():
                processes.kill_stragglers(directory)
            return Observation(ObservedState.RUNNING, message="waiting for processes to exit")
        containment.remove_scratch(directory)
        return dataclasses.replace(
            observe.ended(directory, ending), killed=processes.killed(directory)
        )

    def cancel(self, handle: str) -> None:
        directory = self._dir(handle)
        if not lock.launched_here(directory):
            return
        if record.read(directory / record.STOP) is None:
            record.write(directory / record.STOP, "cancel")
        if not (directory / record.STOP_DEADLINE).exists():
            # On disk, so a worker that restarts after a crash still escalates on time.
            record.write(directory / record.STOP_DEADLINE, repr(self.clock() + self.notice_s))
        self._groups.signal(directory, signal.SIGTERM)
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
            if record.read(directory / record.STOP) is not None or not self._groups.alive(
                directory
            ):
                continue
            if record.read_int(directory / record.EXIT_CODE) is not None:
                continue
            record.write(directory / record.DRAINED, repr(self.clock()))
            self._groups.signal(directory, signal.SIGTERM)
            draining.append(directory)
        deadline = time.monotonic() + (self.notice_s if timeout_s is None else timeout_s)
        while time.monotonic() < deadline and any(self._groups.alive(d) for d in draining):
            time.sleep(0.2)
        for directory in draining:
            self._groups.signal(directory, signal.SIGKILL)  # a no-op for those that have exited
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
            if follow and self._groups.alive(directory):
                time.sleep(0.5)
            elif not follow or record.size(directory / record.LOG) <= position:
                break
        if rest := decoder.decode(b"", final=True):
            yield rest

    def read_log(self, handle: str, *, offset: int = 0) -> Iterator[LogChunk]:
        """The attempt's log from byte `offset` (from the end when negative), in bounded chunks
        (observe.read_log)."""
        yield from observe.read_log(self._dir(handle) / record.LOG, offset=offset)

    # Internals ---------------------------------------------------------------------------------

    def _dir(self, handle: str) -> Path:
        if not handle.startswith(PREFIX):
            raise ValueError(f"not a local launcher handle: {handle!r}")
        attempt_id = handle[len(PREFIX) :]
        if not attempt_id or "/" in attempt_id or attempt_id.startswith("."):
            raise ValueError(f"bad attempt id in handle {handle!r}")
        return self.root / attempt_id

    def _trainer_command(self, request: LaunchRequest) -> list[str]:
        ranks = request.placement.nodes * request.gpus_per_node
        if ranks == 1:
            return [self.trainer_python, "-m", "trainer"]
        return [
            self.trainer_python, "-m", "torch.distributed.run", "--nnodes=1",
            f"--nproc_per_node={ranks}", "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}", "-m", "trainer",
        ]  # fmt: skip

    def _launched(self, directory: Path) -> bool:
        """Whether an earlier launch of the attempt got far enough to keep; under the lock.

        A launch killed after starting the supervisor but before recording its pid left a
        trainer running that nothing watches: record it rather than start a second one, or
        let it be lost. Whatever else such a launch left running is killed."""
        if (directory / record.PID).exists() or (directory / record.NO_CAPACITY).exists():
            return True
        supervisor = processes.supervisor(directory)
        if supervisor is not None:
            processes.record_pid(directory, supervisor)
            return True
        if (directory / record.EXIT_CODE).exists():  # it even finished while no worker watched
            processes.record_no_pid(directory)
            return True
        processes.kill_stragglers(directory)
        deadline = time.monotonic() + processes.STRAGGLERS_EXIT_S
        while processes.attempt_processes(directory) and time.monotonic() < deadline:
            time.sleep(0.05)  # their GPU memory is free once they are gone
        return False

    def _unlaunched(self, directory: Path) -> Observation | None:
        """The attempt has no pid recorded: PENDING while a live worker launches it; LOST when
        that worker hangs past the grace, or died and left nothing to adopt; None when it died
        after starting the trainer, which is now recorded (_launched)."""
        never = Observation(ObservedState.LOST, message="the launch never completed")
        try:
            fd = os.open(directory / lock.LAUNCH_LOCK, os.O_RDONLY)
        except FileNotFoundError:
            return never
        try:
            if not lock.try_lock(fd):
                if time.time() - os.fstat(fd).st_mtime > lock.LAUNCH_GRACE_S:
                    return never
                return Observation(ObservedState.PENDING)
            return None if self._launched(directory) else never
        finally:
            os.close(fd)

    def _deliver_market(self, directory: Path) -> None:
        """The market's notice: SIGTERM when the instance is taken, SIGKILL after the notice."""
        at = record.read(directory / record.PREEMPT_AT)
        if at is None or self.clock() < float(at):
            return
        notice = record.read(directory / record.NOTICE)
        if notice is None:
            record.write(directory / record.NOTICE, repr(self.clock()))
            self._groups.signal(directory, signal.SIGTERM)
        elif self.clock() - float(notice) > self.notice_s:
            self._groups.signal(directory, signal.SIGKILL)

    def _enforce_stop(self, directory: Path) -> None:
        """A stop's escalation: SIGKILL once its persisted deadline has passed. Any worker
        process does it, on any status() or cancel() after the deadline, so it survives the
        death of the one that sent the SIGTERM."""
        deadline = record.read(directory / record.STOP_DEADLINE)
        if deadline is not None and self.clock() >= float(deadline):
            self._groups.signal(directory, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

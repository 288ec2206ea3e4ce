"""The local launcher: each attempt is a process group on this machine (the embedded default).

An attempt lives in `<root>/<attempt id>/`: its run config, log, pid, exit status, and the
notes that explain how it ended (a cancel, a spot preemption notice). Everything the launcher
knows is on disk, so a restarted worker picks up attempts that a dead one started. Spot attempts
go through a simulated market: the preemption notice is SIGTERM to the group (the trainer
checkpoints and exits 75), then SIGKILL after the notice period.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from gpujobs.runtime import ENV_JOB_TOKEN, ENV_RUN_CONFIG
from gpujobs.spec import CapacityType
from worker.launchers.base import LaunchRequest, Observation, ObservedState
from worker.launchers.spot_market import SpotMarket

PREFIX = "local:"
LAUNCH_GRACE_S = 60.0  # longest a launch may hold the lock without having written the pid


class LocalLauncher:
    name = "local"

    def __init__(
        self,
        *,
        root: Path,
        market: SpotMarket | None = None,
        notice_s: float = 10.0,
        python: str = sys.executable,
        clock=time.time,  # type: ignore[no-untyped-def]
    ) -> None:
        self.root = Path(root)  # created by the first launch: readers may mount it read-only
        self.market = market
        self.notice_s = notice_s
        self.python = python
        self.clock = clock
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # The launcher interface ------------------------------------------------------------------

    def spot_available(self) -> bool | None:
        return None if self.market is None else self.market.available(self.clock())

    def launch(self, request: LaunchRequest) -> str:
        self._reap()
        handle = PREFIX + request.attempt_id
        directory = self._dir(handle)
        directory.mkdir(parents=True, exist_ok=True)  # the root too, on the first launch
        try:  # one launch per attempt, even when two workers race to it
            os.close(os.open(directory / "launch.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return handle
        now = self.clock()
        spot = request.capacity_type == CapacityType.SPOT and self.market is not None
        if spot and self.market is not None and not self.market.available(now):
            _write(directory / "no_capacity", "the simulated spot market has no capacity now")
            return handle
        if spot and self.market is not None:
            at = self.market.preemption_time(now=now, attempt_id=request.attempt_id)
            if at is not None:
                _write(directory / "preempt_at", repr(at))
        config = directory / "run_config.json"
        _write(config, request.run_config.model_dump_json(indent=2))
        env = {**os.environ, **request.env}
        env.update(
            {ENV_RUN_CONFIG: str(config), ENV_JOB_TOKEN: request.job_token, "PYTHONUNBUFFERED": "1"}
        )
        command = [
            self.python, "-m", "worker.launchers.supervise", str(directory / "exit_code"), "--",
            *self._trainer_command(request),
        ]  # fmt: skip
        with open(directory / "trainer.log", "ab") as log:
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
        pid = {"pid": process.pid, "start": _start_time(process.pid)}
        _write(directory / "pid", json.dumps(pid))
        return handle

    def status(self, handle: str) -> Observation:
        self._reap()
        directory = self._dir(handle)
        if not (directory / "launch.lock").exists():
            return Observation(ObservedState.LOST, message="no such attempt on this machine")
        if (directory / "no_capacity").exists():
            return Observation(ObservedState.NO_CAPACITY, message=_read(directory / "no_capacity"))
        if not (directory / "pid").exists():
            # A launch in progress in another worker takes milliseconds; one that died between
            # the lock and the pid file never completes, and a relaunch finds the lock: give up.
            if time.time() - (directory / "launch.lock").stat().st_mtime > LAUNCH_GRACE_S:
                return Observation(ObservedState.LOST, message="the launch never completed")
            return Observation(ObservedState.PENDING)
        code = _read_int(directory / "exit_code")
        stop = _read(directory / "stop")
        noticed = (directory / "notice").exists()
        drained = (directory / "drained").exists()  # see drain()
        alive = code is None and self._alive(directory)
        if alive:
            self._deliver_market(directory)
            return Observation(ObservedState.RUNNING)
        if code == 0:  # finished before a stop took effect: the work is done either way
            return Observation(ObservedState.SUCCEEDED, exit_code=0)
        if stop == "cancel":
            return Observation(ObservedState.CANCELLED, exit_code=code)
        if noticed or drained:
            reason = "spot capacity was reclaimed" if noticed else "the worker was stopped"
            return Observation(ObservedState.PREEMPTED, exit_code=code, message=reason)
        if code is None:
            return Observation(ObservedState.LOST, message="the process group disappeared")
        return Observation(ObservedState.FAILED, exit_code=code)

    def cancel(self, handle: str) -> None:
        directory = self._dir(handle)
        if not (directory / "launch.lock").exists():
            return
        if _read(directory / "stop") is None:
            _write(directory / "stop", "cancel")
        self._stop(directory)

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
        directory = self._dir(handle)
        path = directory / "trainer.log"
        position = 0
        while True:
            if path.exists():
                with open(path, encoding="utf-8", errors="replace") as log:
                    log.seek(position)
                    chunk = log.read()
                    position = log.tell()
                if chunk:
                    yield chunk
            if not follow or not self._alive(directory):
                if follow and path.exists() and path.stat().st_size > position:
                    continue
                return
            time.sleep(0.5)

    # Internals ---------------------------------------------------------------------------------

    def _dir(self, handle: str) -> Path:
        if not handle.startswith(PREFIX):
            raise ValueError(f"not a local launcher handle: {handle!r}")
        attempt_id = handle[len(PREFIX) :]
        if not attempt_id or "/" in attempt_id or attempt_id.startswith("."):
            raise ValueError(f"bad attempt id in handle {handle!r}")
        return self.root / attempt_id

    def _trainer_command(self, request: LaunchRequest) -> list[str]:
        processes = request.nodes * request.gpus_per_node
        if processes == 1:
            return [self.python, "-m", "trainer"]
        return [
            self.python, "-m", "torch.distributed.run", "--nnodes=1",
            f"--nproc_per_node={processes}", "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}", "-m", "trainer",
        ]  # fmt: skip

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

    def _stop(self, directory: Path) -> None:
        self._signal(directory, signal.SIGTERM)

        def escalate() -> None:
            deadline = time.monotonic() + self.notice_s
            while time.monotonic() < deadline:
                if not self._alive(directory):
                    return
                time.sleep(0.2)
            self._signal(directory, signal.SIGKILL)

        threading.Thread(target=escalate, daemon=True, name="gpujobs-stop").start()

    def _signal(self, directory: Path, sig: signal.Signals) -> None:
        pid_file = _read(directory / "pid")
        if pid_file is None or not self._alive(directory):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(json.loads(pid_file)["pid"], sig)


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
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    return int(text) if text not in (None, "") else None

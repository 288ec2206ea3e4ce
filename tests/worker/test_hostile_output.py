"""What a trainer leaves behind is a team's output, and the launcher reads it as root: attacks on
those reads, run for real. A hostile workload (tests/worker/hostile_output.py) plants a link, a
FIFO or a huge file where the launcher reads the trainer's termination message, or writes a
huge log; another job's uid starts processes that claim this attempt's run config. Each one
worked before the launcher read trainer output as hostile (issue 22)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from api.logs.reader import CHUNK_BYTES
from devstack.confinement import trainer_python, trainer_python_path
from gpujobs.runtime import (
    ENV_RUN_CONFIG,
    EXIT_CONFIG_ERROR,
    TERMINATION_MESSAGE_MAX_BYTES,
    RunConfig,
)
from gpujobs.spec import TrainerSpec
from tests.worker.hostile_output import LINE
from tests.worker.support import a_placement
from tests.worker.test_local_launcher import (
    TIMEOUT,
    launchers,  # noqa: F401  (the fixture that cleans up what a test started)
    make,
    tmp_path,  # noqa: F401  (reachable by the trainers' uids, unlike pytest's own)
    wait_for,
    wait_until_done,
)
from worker.launchers.base import LaunchRequest, ObservedState
from worker.launchers.identity import identity_for_job
from worker.launchers.local import UID_REGISTRY, LocalLauncher

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = "tests.worker.hostile_output:build"
ADMIN_TOKEN = "gpj_admin-never-shown-to-a-team"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root runs trainers (and impostors) as other uids"
)


def hostile(
    base: Path, attempt_id: str, attack: str, *, job_id: str = "job-a", **env: str
) -> LaunchRequest:
    trainer = TrainerSpec.model_validate(
        {"workload": WORKLOAD, "steps": 1, "batch_size": 2, "dataloader": {"num_workers": 0}}
    )
    config = RunConfig(
        job_id=job_id,
        attempt_id=attempt_id,
        trainer=trainer,
        checkpoint_uri=str(base / "checkpoints" / job_id),
        allowed_workload_prefixes=["tests.worker.hostile_output"],
    )
    return LaunchRequest(
        job_id=job_id,
        attempt_id=attempt_id,
        attempt_number=1,
        job_name=job_id,
        team="team-a",
        placement=a_placement(),
        gpus_per_node=1,
        run_config=config,
        job_token="gpj_job-token",
        env={"HOSTILE_OUTPUT": attack, **env},
    )


def launcher_for(made: list[LocalLauncher], base: Path) -> LocalLauncher:
    return make(made, base / "attempts", python_path=trainer_python_path())


def exited(launcher: LocalLauncher, attempt_id: str) -> None:
    """Wait until the supervisor has recorded the trainer's exit and is gone, without asking
    status() (which is what the attacks target)."""
    directory = launcher.root / attempt_id

    def done() -> bool:
        if not (directory / "exit_code").exists():
            return False
        pid = json.loads((directory / "pid").read_text())["pid"]
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        return state == "Z"

    wait_for(done, f"the trainer of {attempt_id} to exit")


def unless_blocked(call: Callable[[], Any], *, fifo: Path) -> list[Any]:
    """[what `call` returns], or [] when it blocks on `fifo` (which is then written, to let it
    go). The join's timeout is a guard against a hang, not a measure."""
    returned: list[Any] = []
    thread = threading.Thread(target=lambda: returned.append(call()), daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join()
        return []
    return returned


STATUS_AS_A_SERVER = """
import json, sys
from pathlib import Path
from worker.launchers.local import LocalLauncher
observed = LocalLauncher(root=Path(sys.argv[1])).status(sys.argv[2])
print(json.dumps([observed.state, observed.exit_code, observed.message]))
"""


@needs_root
def test_a_termination_log_linked_to_the_servers_environment_is_not_read(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    launcher = launcher_for(launchers, tmp_path)
    request = hostile(tmp_path, "att-link", "symlink", HOSTILE_TARGET="/proc/self/environ")
    handle = launcher.launch(request)
    exited(launcher, "att-link")
    link = launcher.root / "att-link" / "work" / "termination-log"
    assert os.readlink(link) == "/proc/self/environ"

    # The reconciler's status(), in a server process that holds the admin token.
    observed = subprocess.run(
        [sys.executable, "-c", STATUS_AS_A_SERVER, str(launcher.root), handle],
        env={**os.environ, "GPUJOBS_ADMIN_TOKEN": ADMIN_TOKEN},
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=True,
    )  # fmt: skip

    state, code, message = json.loads(observed.stdout)
    assert ADMIN_TOKEN not in observed.stdout
    assert (state, code) == (ObservedState.FAILED, 1)  # no message of its own: its exit code
    assert "GPUJOBS_ADMIN_TOKEN" not in (message or "")


@needs_root
def test_a_termination_log_hard_linked_to_a_file_of_the_servers_is_not_read(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    """A kernel with fs.protected_hardlinks=0 lets any uid link any file it can reach; this one
    refuses the trainer, so the test makes the link the trainer could make there."""
    secret = tmp_path / "secret"
    secret.write_text(ADMIN_TOKEN)
    secret.chmod(0o600)
    launcher = launcher_for(launchers, tmp_path)
    handle = launcher.launch(hostile(tmp_path, "att-hard", "exit"))
    exited(launcher, "att-hard")
    os.link(secret, launcher.root / "att-hard" / "work" / "termination-log")

    observed = launcher.status(handle)

    assert (observed.state, observed.exit_code) == (ObservedState.FAILED, 1)
    assert ADMIN_TOKEN not in (observed.message or "")


@needs_root
def test_a_termination_log_made_a_fifo_does_not_block_the_status_check(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    launcher = launcher_for(launchers, tmp_path)
    handle = launcher.launch(hostile(tmp_path, "att-fifo", "fifo"))
    exited(launcher, "att-fifo")
    fifo = launcher.root / "att-fifo" / "work" / "termination-log"

    observed = unless_blocked(lambda: launcher.status(handle), fifo=fifo)

    assert observed, "status() blocked on the trainer's FIFO"
    assert [(o.state, o.exit_code) for o in observed] == [(ObservedState.FAILED, 1)]


@needs_root
def test_a_huge_termination_log_gives_a_bounded_message(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    launcher = launcher_for(launchers, tmp_path)
    size = 20 * 1024 * 1024
    handle = launcher.launch(hostile(tmp_path, "att-huge", "large", HOSTILE_BYTES=str(size)))
    exited(launcher, "att-huge")
    assert (launcher.root / "att-huge" / "work" / "termination-log").stat().st_size >= size - LINE

    observed = launcher.status(handle)

    assert (observed.state, observed.exit_code) == (ObservedState.FAILED, EXIT_CONFIG_ERROR)
    assert observed.message is not None and observed.message.endswith("why ".ljust(LINE - 1, "y"))
    assert len(observed.message.encode()) <= TERMINATION_MESSAGE_MAX_BYTES


IMPOSTOR = "import ctypes, sys, time; {hide}print('up', flush=True); time.sleep(600)"
# PR_SET_DUMPABLE 0: the files in /proc/<pid> are root's.
UNDUMPABLE = "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "


@pytest.fixture
def impostors() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


@needs_root
def test_another_jobs_processes_claiming_an_attempt_do_not_keep_it_running(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
    impostors: list[subprocess.Popen[str]],
) -> None:
    """Team B's uid starts processes with team A's run config in their environment (its path
    is on every command line A's trainer shows in /proc), one of them undumpable (its /proc
    entry then belongs to root): A's attempt must end when A's trainer does, not stay running
    and billed to A while B's processes live, and B's processes are not A's to kill."""
    launcher = launcher_for(launchers, tmp_path)
    handle = launcher.launch(hostile(tmp_path, "att-victim", "exit", job_id="job-a"))
    victim = launcher.root / "att-victim"
    other = identity_for_job(launcher.root / UID_REGISTRY, job_id="job-b", uids=launcher.uids)
    assert other.uid != (victim / "work").stat().st_uid
    exited(launcher, "att-victim")

    for hide in ("", UNDUMPABLE):
        impostor = subprocess.Popen(
            [trainer_python(), "-c", IMPOSTOR.format(hide=hide)],
            env={ENV_RUN_CONFIG: str(victim / "run_config.json"), "PATH": "/usr/bin:/bin"},
            user=other.uid, group=other.gid, extra_groups=[], cwd="/", stdout=subprocess.PIPE,
            text=True, start_new_session=True,
        )  # fmt: skip
        impostors.append(impostor)
        assert impostor.stdout is not None and impostor.stdout.readline() == "up\n"
    assert Path(f"/proc/{impostors[1].pid}/status").stat().st_uid == 0  # it hides its owner

    observed = launcher.status(handle)

    assert (observed.state, observed.exit_code) == (ObservedState.FAILED, 1)
    assert launcher.status(handle) == observed
    for impostor in impostors:
        assert impostor.poll() is None, "another job's process was killed as the attempt's"
    launcher.cancel(handle)
    assert all(impostor.poll() is None for impostor in impostors)


@needs_root
def test_a_huge_log_is_read_a_bounded_chunk_at_a_time(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    launcher = launcher_for(launchers, tmp_path)
    size = 24 * 1024 * 1024
    handle = launcher.launch(hostile(tmp_path, "att-log", "log", HOSTILE_BYTES=str(size)))
    wait_until_done(launcher, handle)
    log = launcher.root / "att-log" / "trainer.log"
    total = log.stat().st_size
    assert total >= size

    for follow in (False, True):
        tracemalloc.start()
        try:
            lengths = [len(chunk) for chunk in launcher.logs(handle, follow=follow)]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert sum(lengths) == total  # ASCII: a character a byte
        assert max(lengths) <= CHUNK_BYTES
        assert peak < 8 * CHUNK_BYTES, f"{peak} bytes held to read a {total}-byte log"

    # From an offset, or from the end: only what is asked for is read.
    last = list(launcher.read_log(handle, offset=-LINE))
    assert [(c.start, c.data) for c in last] == [(total - LINE, log.read_bytes()[-LINE:])]
    assert list(launcher.read_log(handle, offset=total)) == []
    middle = list(launcher.read_log(handle, offset=total - CHUNK_BYTES - 10))
    assert [(c.start, len(c.data)) for c in middle] == [
        (total - CHUNK_BYTES - 10, CHUNK_BYTES),
        (total - 10, 10),
    ]


@needs_root
def test_a_log_the_launcher_did_not_write_is_not_read(
    tmp_path: Path,  # noqa: F811
    launchers: list[LocalLauncher],  # noqa: F811
) -> None:
    """What holds trainer.log in place: the attempt's directory is the server's, so the job's
    uid can neither write the log nor put a link in its place."""
    launcher = launcher_for(launchers, tmp_path)
    handle = launcher.launch(hostile(tmp_path, "att-own", "exit"))
    wait_until_done(launcher, handle)
    directory = launcher.root / "att-own"
    job = (directory / "work").stat()
    log = directory / "trainer.log"
    assert (directory.stat().st_uid, directory.stat().st_gid) == (0, job.st_gid)
    assert directory.stat().st_mode & 0o777 == 0o750
    assert (log.stat().st_uid, log.stat().st_mode & 0o777) == (0, 0o640)
    as_the_job = (
        "import os, sys; d = sys.argv[1]\n"
        "for step in (lambda: os.symlink('/etc/shadow', d + '/x'),\n"
        "             lambda: os.rename(d + '/trainer.log', d + '/y'),\n"
        "             lambda: open(d + '/trainer.log', 'a')):\n"
        "    try: step(); print('ok')\n"
        "    except PermissionError: print('refused')\n"
    )
    tried = subprocess.run(
        [trainer_python(), "-c", as_the_job, str(directory)], user=job.st_uid, group=job.st_gid,
        extra_groups=[], capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    assert tried.stdout.split() == ["refused"] * 3

    # Were the server's own user running trainers (not root), a link would not be followed.
    secret = tmp_path / "secret"
    secret.write_text(ADMIN_TOKEN)
    log.unlink()
    log.symlink_to(secret)
    assert ADMIN_TOKEN not in "".join(launcher.logs(handle))
    log.unlink()
    os.mkfifo(log)
    assert unless_blocked(lambda: list(launcher.logs(handle)), fifo=log) == [[]]

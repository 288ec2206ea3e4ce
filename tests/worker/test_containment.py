"""Attacks by a team's own code, run for real: the local launcher starts `python -m trainer` (under
torchrun, gloo on loopback) with a hostile workload, next to another team's running job, on a
server that holds an admin token, a database, a credentials file and S3 keys of its own. The
hostile code records what it could see and reach in its working directory; the test reads that.

Run as root (these machines, CI, the compose worker), trainers run as their job's own uid. Not
as root, a trainer is the server's user and only its environment is contained (docs/security.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from api.database import make_engine
from api.migrate import upgrade_to_head
from api.settings import Settings
from devstack.confinement import open_directory, trainer_python, trainer_python_path
from gpujobs.runtime import EXIT_CONFIG_ERROR, RunConfig
from gpujobs.spec import TrainerSpec
from tests.worker.support import a_placement
from worker.launchers.base import LaunchRequest, Observation, ObservedState
from worker.launchers.local import LocalLauncher
from worker.launchers.registry import make_launcher
from worker.standalone import write_credentials

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "tests.worker.hostile:build"
TIMEOUT = 120.0

ADMIN_TOKEN = "gpj_admin-3f1c-never-in-a-trainer"
DATABASE_URL = "postgresql+psycopg://gpujobs:db-password-77ab@db.internal/gpujobs"
SERVER_S3_KEY = "SERVERKEYNEVERINATRAINER"
SERVER_S3_SECRET = "server-s3-secret-9e0d"
TEAM_TOKEN = "gpj_team-token-in-the-credentials-file"
TRAINER_S3_KEY = "TRAINERKEYFORCHECKPOINTS"
TRAINER_S3_SECRET = "trainer-s3-secret-limited-to-a-prefix"
SECRETS = (ADMIN_TOKEN, "db-password-77ab", SERVER_S3_KEY, SERVER_S3_SECRET, TEAM_TOKEN)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root can run trainers as other uids (docs/security.md)"
)


@dataclass
class Server:
    base: Path
    settings: Settings
    launcher: LocalLauncher

    @property
    def home(self) -> Path:
        return self.settings.home

    def checkpoints(self, job_id: str) -> Path:
        return Path(self.settings.checkpoint_root()) / job_id

    def attempt(self, attempt_id: str) -> Path:
        return self.launcher.root / attempt_id


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """An embedded server's state and environment, as `make run` leaves them."""
    base = open_directory()
    for key, value in {
        "GPUJOBS_ADMIN_TOKEN": ADMIN_TOKEN,
        "GPUJOBS_DATABASE_URL": DATABASE_URL,
        "AWS_ACCESS_KEY_ID": SERVER_S3_KEY,
        "AWS_SECRET_ACCESS_KEY": SERVER_S3_SECRET,
        "OMP_NUM_THREADS": "1",  # the operator's tuning, passed through by name
        "NCCL_DEBUG": "WARN",  # and by prefix
    }.items():
        monkeypatch.setenv(key, value)
    # The submit-time workload allowlist, read by the API and the trainer where they support it.
    allowlist: dict[str, Any] = {"workload_module_prefixes": ["tests.worker.hostile"]}
    settings = Settings(
        home=base / "home",
        database_url="",
        credentials_file=base / "config" / "credentials.json",
        admin_token=ADMIN_TOKEN,
        trainer_python=trainer_python(),
        trainer_python_path=trainer_python_path(),  # where the allowed module is installed
        trainer_s3_access_key_id=TRAINER_S3_KEY,
        trainer_s3_secret_access_key=TRAINER_S3_SECRET,
        **allowlist,
    )
    engine = make_engine(settings)
    upgrade_to_head(engine)
    write_credentials(settings.credentials_file, url=settings.api_url(), token=TEAM_TOKEN)
    launcher = make_launcher(settings)
    assert isinstance(launcher, LocalLauncher)
    made = Server(base=base, settings=settings, launcher=launcher)
    yield made
    engine.dispose()
    handles = [f"local:{d.name}" for d in launcher.root.glob("*") if (d / "pid").exists()]
    for handle in handles:
        launcher.cancel(handle)
    for handle in handles:
        finished(launcher, handle)
    shutil.rmtree(base, ignore_errors=True)


def launch_request(
    server: Server,
    *,
    job_id: str,
    attempt_id: str,
    team: str,
    workload: str,
    steps: int,
    processes: int = 1,
    env: dict[str, str] | None = None,
    checkpoint: dict[str, int] | None = None,
) -> LaunchRequest:
    trainer = TrainerSpec.model_validate(
        {
            "workload": workload,
            "steps": steps,
            "batch_size": 2,
            "amp": "off",
            "dataloader": {"num_workers": 0},
            "checkpoint": checkpoint or {"every_steps": 5},
            "args": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16}
            if workload == "gpt"
            else {},
        }
    )
    allowed: dict[str, Any] = {}
    if "allowed_workload_prefixes" in RunConfig.model_fields:
        allowed["allowed_workload_prefixes"] = ["tests.worker.hostile"]
    config = RunConfig(
        job_id=job_id,
        attempt_id=attempt_id,
        trainer=trainer,
        checkpoint_uri=str(server.checkpoints(job_id)),
        progress_every_s=0.05,
        **allowed,
    )
    return LaunchRequest(
        job_id=job_id,
        attempt_id=attempt_id,
        attempt_number=1,
        job_name=job_id,
        team=team,
        placement=a_placement(),
        gpus_per_node=processes,
        run_config=config,
        job_token=f"gpj_job-token-of-{job_id}",
        env=env or {},
    )


def wait_for(predicate: Any, what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def finished(launcher: LocalLauncher, handle: str) -> Observation:
    def done() -> Observation | None:
        observed = launcher.status(handle)
        return (
            None if observed.state in (ObservedState.RUNNING, ObservedState.PENDING) else observed
        )

    found: Observation = wait_for(done, f"{handle} to finish")
    return found


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def owner(pid: int) -> int:
    return Path(f"/proc/{pid}").stat().st_uid


@needs_root
def test_a_hostile_workload_reaches_no_secret_no_server_state_and_no_other_job(
    server: Server,
) -> None:
    launcher = server.launcher
    # Another team's job, running, with a checkpoint and a log.
    victim = launch_request(
        server, job_id="job-victim", attempt_id="att-victim", team="team-b", workload="gpt",
        steps=1_000_000, checkpoint={"every_steps": 1000, "keep_last": 100},
    )  # fmt: skip
    victim_handle = launcher.launch(victim)
    # Kept for the whole test (a tiny model runs hundreds of steps a second): the attack's target.
    victim_manifest = server.checkpoints("job-victim") / "step-000000001000" / "manifest.json"
    wait_for(victim_manifest.exists, "the other team's first checkpoint")
    supervisor = json.loads((server.attempt("att-victim") / "pid").read_text())["pid"]
    victim_trainer = wait_for(lambda: children(supervisor), "the other team's trainer")[0]

    # A sitecustomize.py that would run inside the trainer if PYTHONPATH reached it.
    evil = server.base / "evil"
    evil.mkdir(mode=0o777)
    evil.chmod(0o777)
    ran = evil / "sitecustomize-ran"
    (evil / "sitecustomize.py").write_text(f"open({str(ran)!r}, 'w').write('ran')\n")
    subprocess.run(
        [trainer_python(), "-c", "pass"], env={"PYTHONPATH": str(evil)}, user=owner(victim_trainer),
        check=True, cwd="/",
    )  # fmt: skip
    assert ran.exists(), "the probe works: PYTHONPATH would have run the file"
    ran.unlink()

    own = server.attempt("att-hostile")
    targets = {
        "credentials file": ["read", str(server.settings.credentials_file)],
        "database": ["read", str(server.home / "gpujobs.db")],
        "server environment": ["read", f"/proc/{os.getpid()}/environ"],
        "GPUJOBS_HOME": ["list", str(server.home)],
        "launcher root": ["list", str(launcher.root)],
        "uid registry": ["list", str(launcher.root / ".uids")],
        "checkpoint root": ["list", str(server.checkpoints("job-victim").parent)],
        "other job's checkpoints": ["list", str(server.checkpoints("job-victim"))],
        "other job's manifest": ["read", str(victim_manifest)],
        "other job's checkpoint, overwritten": ["write", str(victim_manifest)],
        "other job's attempt": ["list", str(server.attempt("att-victim"))],
        "other job's log": ["read", str(server.attempt("att-victim") / "trainer.log")],
        "other job's working directory": ["list", str(server.attempt("att-victim") / "work")],
        "other job's trainer, signalled": ["signal", str(victim_trainer)],
        "other job's environment (its token)": ["read", f"/proc/{victim_trainer}/environ"],
        "own supervisor, signalled": ["signal", str(supervisor)],
        "own exit status, forged": ["write", str(own / "exit_code")],
        # What it must still reach: its own log, checkpoints and run config.
        "own log": ["read", str(own / "trainer.log")],
        "own run config": ["read", str(own / "run_config.json")],
        "own checkpoints": ["list", str(server.checkpoints("job-hostile"))],
    }
    hostile = launch_request(
        server, job_id="job-hostile", attempt_id="att-hostile", team="team-a", workload=HOSTILE,
        steps=6, processes=2,
        env={
            "HOSTILE_TARGETS": json.dumps(targets),
            # Refused at submit; here the request carries them anyway (defence in depth).
            "LD_PRELOAD": "/nonexistent/libevil.so",
            "PYTHONPATH": str(evil),
            "GPUJOBS_ADMIN_TOKEN": "forged",
            "AWS_SECRET_ACCESS_KEY": "forged",
            "HOME": "/root",
        },
    )  # fmt: skip

    handle = launcher.launch(hostile)
    observed = finished(launcher, handle)
    log = "".join(launcher.logs(handle))

    assert observed == Observation(ObservedState.SUCCEEDED, exit_code=0), log
    # Training itself still works for the job's uid: torchrun, gloo on loopback, checkpoints.
    assert (server.checkpoints("job-hostile") / "step-000000000006" / "manifest.json").exists()
    assert '"world_size": 2' in log
    reports = [json.loads((own / "work" / f"hostile-{rank}.json").read_text()) for rank in (0, 1)]
    assert log.count("HOSTILE ") == 2
    job_uid = server.checkpoints("job-hostile").stat().st_uid
    for report in reports:
        # Its own uid: not root, not the other job's, no supplementary groups.
        assert report["uid"] == report["euid"] == job_uid
        assert report["uid"] not in (0, owner(victim_trainer))
        assert set(report["groups"]) <= {report["gid"]}
        # (a) The environment: the platform's allowlist, nothing of the server's.
        env = report["environ"]
        for secret in SECRETS:
            assert secret not in report["proc_environ"]
        assert "GPUJOBS_ADMIN_TOKEN" not in env and "GPUJOBS_DATABASE_URL" not in env
        assert env["GPUJOBS_JOB_TOKEN"] == "gpj_job-token-of-job-hostile"
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
            TRAINER_S3_KEY, TRAINER_S3_SECRET,
        )  # fmt: skip
        assert env["HOME"] == report["cwd"] == str(own / "work")
        assert (env["OMP_NUM_THREADS"], env["NCCL_DEBUG"]) == ("1", "WARN")
        # (d) Loader and import path variables from the request never arrive.
        assert "LD_PRELOAD" not in report["proc_environ"]
        assert str(evil) not in env.get("PYTHONPATH", "")
        # (b), (c) Server state and the other job: refused by the kernel, each one.
        outcomes = report["outcomes"]
        reached = {label for label, outcome in outcomes.items() if outcome == "ok"}
        assert reached == {"own log", "own run config", "own checkpoints"}, outcomes
        assert outcomes["credentials file"] == "PermissionError"
        assert outcomes["database"] == "PermissionError"
        assert outcomes["server environment"] == "PermissionError"
        assert outcomes["other job's trainer, signalled"] == "PermissionError"
        assert outcomes["other job's environment (its token)"] == "PermissionError"
    assert not ran.exists(), "PYTHONPATH from the request reached the trainer"
    assert "libevil" not in log
    # The other job never noticed.
    assert launcher.status(victim_handle).state == ObservedState.RUNNING
    assert (server.attempt("att-hostile") / "exit_code").read_text() == "0"


def test_server_state_is_private_where_the_server_creates_it(server: Server) -> None:
    """The modes that the attack test relies on, also where trainers share the server's uid."""
    assert server.home.stat().st_mode & 0o777 == 0o711
    assert (server.home / "gpujobs.db").stat().st_mode & 0o777 == 0o600
    for suffix in ("-wal", "-shm"):
        file = server.home / f"gpujobs.db{suffix}"
        if file.exists():
            assert file.stat().st_mode & 0o777 == 0o600
    assert server.settings.credentials_file.stat().st_mode & 0o777 == 0o600
    assert server.settings.credentials_file.parent.stat().st_mode & 0o777 == 0o700


@needs_root
def test_a_directory_the_jobs_uid_cannot_reach_fails_the_attempt_at_once_saying_which(
    server: Server,
) -> None:
    hidden = server.base / "private"
    hidden.mkdir(mode=0o700)
    request = launch_request(
        server, job_id="job-hidden", attempt_id="att-hidden", team="team-a", workload="gpt", steps=1
    )
    config = request.run_config.model_copy(update={"checkpoint_uri": str(hidden / "job-hidden")})
    request = dataclasses.replace(request, run_config=config)

    handle = server.launcher.launch(request)
    observed = finished(server.launcher, handle)

    assert (observed.state, observed.exit_code) == (ObservedState.FAILED, EXIT_CONFIG_ERROR)
    assert observed.message and f"cannot write {hidden / 'job-hidden'}" in observed.message
    log = "".join(server.launcher.logs(handle))
    assert f"cannot write {hidden / 'job-hidden'}" in log
    assert "docs/security.md" in log
    assert '"event": "start"' not in log  # refused before the trainer ran

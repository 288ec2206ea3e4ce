"""The trainer's environment is built from an allowlist; the uid a job runs as is its own."""

from __future__ import annotations

import tempfile
import threading
import uuid
from pathlib import Path

import pytest

import api.settings
from api.settings import Settings
from gpujobs.runtime import ENV_JOB_TOKEN, ENV_RUN_CONFIG, ENV_RUN_CONFIG_JSON, RunConfig
from gpujobs.spec import TrainerSpec
from tests.worker.support import a_placement
from worker.launchers.base import LaunchRequest
from worker.launchers.environment import (
    SOCKET_PATH_MAX,
    TMPDIR_MAX,
    Host,
    S3Credentials,
    home_environment,
    trainer_environment,
    user_key_allowed,
)
from worker.launchers.identity import UidRange, UidsExhausted, identity_for_job
from worker.launchers.kubernetes.config import KubernetesLauncherConfig
from worker.launchers.kubernetes.manifests import build_manifests
from worker.launchers.local.containment import prepare_scratch, remove_scratch

SERVER = {
    "GPUJOBS_ADMIN_TOKEN": "admin-secret",
    "GPUJOBS_DATABASE_URL": "postgresql://u:db-secret@db/gpujobs",
    "AWS_ACCESS_KEY_ID": "SERVERKEY",
    "AWS_SECRET_ACCESS_KEY": "server-secret",
    "DATABASE_PASSWORD": "another-secret",
    "HOME": "/root",
    "PATH": "/root/bin:/usr/bin",
    "LD_PRELOAD": "/opt/server-only.so",
    "PYTHONPATH": "/srv/gpujobs",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "NCCL_SOCKET_IFNAME": "eth0",
    "TORCH_CUDA_ARCH_LIST": "9.0",
    "OMP_NUM_THREADS": "4",
}


def request(env: dict[str, str] | None = None, *, s3_endpoint: str | None = None) -> LaunchRequest:
    return LaunchRequest(
        job_id="job-1",
        attempt_id="att-1",
        attempt_number=1,
        job_name="tiny",
        team="team-a",
        placement=a_placement(),
        gpus_per_node=1,
        run_config=RunConfig.model_validate(
            {
                "trainer": TrainerSpec.model_validate({"steps": 1}),
                "checkpoint_uri": "/c/job-1",
                "s3_endpoint_url": s3_endpoint,
            }
        ),
        job_token="gpj_job-token",
        env=env or {},
    )


def local(env: dict[str, str] | None = None) -> dict[str, str]:
    return trainer_environment(
        request(env),
        run_config={ENV_RUN_CONFIG: "/a/att-1/run_config.json"},
        home="/a/att-1/work",
        host=Host(server_environ=SERVER, bin_dir="/opt/py/bin"),
    )


def test_nothing_of_the_servers_environment_arrives_but_the_allowlisted_tuning() -> None:
    env = local()

    assert env == {
        ENV_RUN_CONFIG: "/a/att-1/run_config.json",
        ENV_JOB_TOKEN: "gpj_job-token",
        "HOME": "/a/att-1/work",
        "USER": "trainer",
        "LOGNAME": "trainer",
        "TMPDIR": "/a/att-1/work/tmp",
        "XDG_CACHE_HOME": "/a/att-1/work/.cache",
        "TORCH_HOME": "/a/att-1/work/.cache/torch",
        "TRITON_CACHE_DIR": "/a/att-1/work/.cache/triton",
        "TORCHINDUCTOR_CACHE_DIR": "/a/att-1/work/.cache/torchinductor",
        "CUDA_CACHE_PATH": "/a/att-1/work/.cache/nv",
        "PATH": "/opt/py/bin:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "OMP_NUM_THREADS": "4",
    }
    for secret in ("admin-secret", "db-secret", "SERVERKEY", "server-secret", "another-secret"):
        assert all(secret not in value for value in env.values())


def test_s3_credentials_are_the_trainers_own_and_the_endpoint_comes_from_the_run_config() -> None:
    keys = S3Credentials(access_key_id="TRAINERKEY", secret_access_key="trainer-secret", region="r")
    env = trainer_environment(
        request(s3_endpoint="http://127.0.0.1:8333"),
        run_config={ENV_RUN_CONFIG: "/x"},
        home="/w",
        s3=keys,
        host=Host(server_environ=SERVER),
    )

    assert env["AWS_ACCESS_KEY_ID"] == "TRAINERKEY"
    assert env["AWS_SECRET_ACCESS_KEY"] == "trainer-secret"
    assert env["AWS_DEFAULT_REGION"] == "r"
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:8333"
    assert "AWS_SESSION_TOKEN" not in env
    # Without trainer keys, none at all: never the server's.
    assert not any(key.startswith("AWS_") for key in local())


def test_a_teams_variables_sit_under_the_platforms_and_loader_variables_never_pass() -> None:
    hostile = {
        "WANDB_PROJECT": "mine",
        "OMP_NUM_THREADS": "2",  # a team may tune what the server would pass through
        "LD_PRELOAD": "/tmp/evil.so",
        "LD_LIBRARY_PATH": "/tmp",
        "PYTHONPATH": "/tmp/evil",
        "PYTHONSTARTUP": "/tmp/evil.py",
        "GPUJOBS_JOB_TOKEN": "forged",
        "GPUJOBS_RUN_CONFIG": "/tmp/forged.json",
        "AWS_SECRET_ACCESS_KEY": "forged",
        "PATH": "/tmp",
        "HOME": "/root",
        "BASH_ENV": "/tmp/evil.sh",
        "NCCL_NET_PLUGIN": "/tmp/evil",
        "lower_case": "x",
    }

    env = local(hostile)

    assert env["WANDB_PROJECT"] == "mine"
    assert env[ENV_JOB_TOKEN] == "gpj_job-token"
    assert env[ENV_RUN_CONFIG] == "/a/att-1/run_config.json"
    assert env["HOME"] == "/a/att-1/work"
    assert env["PATH"].startswith("/opt/py/bin:")
    assert env["OMP_NUM_THREADS"] == "4"  # the operator's value wins over the team's
    for key in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV"):
        assert key not in env or env[key] == SERVER.get(key), key
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert "NCCL_NET_PLUGIN" not in env and "lower_case" not in env


def test_the_operators_workload_path_is_the_only_pythonpath() -> None:
    env = trainer_environment(
        request({"PYTHONPATH": "/tmp/evil"}),
        run_config={ENV_RUN_CONFIG: "/x"},
        home="/w",
        host=Host(server_environ=SERVER, python_path="/srv/workloads"),
    )
    assert env["PYTHONPATH"] == "/srv/workloads"


def test_a_pod_gets_its_token_from_a_secret_and_path_from_its_image() -> None:
    env = trainer_environment(
        request({"WANDB_PROJECT": "mine", "LD_PRELOAD": "/tmp/evil.so"}),
        run_config={ENV_RUN_CONFIG_JSON: "{}"},
        home="/scratch",
        include_token=False,
    )

    assert env == {
        ENV_RUN_CONFIG_JSON: "{}",
        "WANDB_PROJECT": "mine",
        "PYTHONUNBUFFERED": "1",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        **home_environment("/scratch"),
    }


def test_a_team_cannot_move_the_trainers_identity_or_caches() -> None:
    hostile = {
        key: "/tmp/shared"
        for key in ("USER", "TMPDIR", "XDG_CACHE_HOME", "TORCH_HOME", "TRITON_CACHE_DIR")
    }
    env = local(hostile | {"TORCHINDUCTOR_CACHE_DIR": "/tmp/shared"})
    for key in (*hostile, "TORCHINDUCTOR_CACHE_DIR"):
        assert env[key] != "/tmp/shared", key


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("WANDB_PROJECT", True),
        ("HF_HUB_OFFLINE", True),
        ("NCCL_DEBUG", True),
        ("LD_PRELOAD", False),
        ("LD_AUDIT", False),
        ("PYTHONHOME", False),
        ("PYTHONWARNINGS", False),
        ("GPUJOBS_JOB_TOKEN", False),
        ("AWS_PROFILE", False),
        ("GOOGLE_APPLICATION_CREDENTIALS", False),
        ("PATH", False),
        ("HOME", False),
        ("TMPDIR", False),
        ("lower", False),
        ("9LIVES", False),
        ("A" * 129, False),
    ],
)
def test_user_key_allowlist(key: str, allowed: bool) -> None:
    assert user_key_allowed(key) is allowed


def test_each_job_gets_its_own_uid_and_keeps_it(tmp_path: Path) -> None:
    uids = UidRange(first=300_000, count=50)
    registry = tmp_path / "uids"

    first = {job: identity_for_job(registry, job_id=job, uids=uids) for job in map(str, range(50))}

    assert len({identity.uid for identity in first.values()}) == 50  # no two jobs share one
    assert all(300_000 <= identity.uid < 300_050 for identity in first.values())
    assert all(identity.gid == identity.uid for identity in first.values())
    # A restarted worker (a new lookup) finds the same uid for the same job.
    assert identity_for_job(registry, job_id="7", uids=uids) == first["7"]
    with pytest.raises(UidsExhausted, match="GPUJOBS_TRAINER_UID_COUNT"):
        identity_for_job(registry, job_id="one too many", uids=uids)


def test_two_workers_claiming_uids_at_once_never_share_one(tmp_path: Path) -> None:
    uids = UidRange(first=300_000, count=40)
    registry = tmp_path / "uids"
    found: dict[str, set[int]] = {str(job): set() for job in range(20)}
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            for job in found:
                found[job].add(identity_for_job(registry, job_id=job, uids=uids).uid)
        except BaseException as exc:  # a failed claim must fail the test, not vanish
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert all(len(uids_of_job) == 1 for uids_of_job in found.values())
    assert len({next(iter(u)) for u in found.values()}) == 20


@pytest.mark.parametrize(("first", "count"), [(0, 10), (999, 10), (1000, 0), (2**31 - 5, 10)])
def test_a_uid_range_that_could_reach_root_or_system_users_is_refused(
    first: int, count: int
) -> None:
    with pytest.raises(ValueError, match="trainer uid range"):
        UidRange(first=first, count=count)


def test_a_trainer_pod_gets_the_same_allowlist_and_its_token_only_from_the_secret() -> None:
    hostile = {"WANDB_MODE": "offline", "LD_PRELOAD": "/tmp/evil.so", "PYTHONPATH": "/tmp/evil",
               "AWS_SECRET_ACCESS_KEY": "forged", "GPUJOBS_JOB_TOKEN": "forged"}  # fmt: skip
    manifests = build_manifests(request(hostile), KubernetesLauncherConfig(namespace="ml"))

    container = manifests.job.spec.template.spec.containers[0]
    env = {var.name: var for var in container.env}

    assert env["WANDB_MODE"].value == "offline"
    assert not {"LD_PRELOAD", "PYTHONPATH", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert env[ENV_JOB_TOKEN].value is None
    assert env[ENV_JOB_TOKEN].value_from.secret_key_ref.name == manifests.secret.metadata.name
    assert "gpj_job-token" not in str(container.to_dict())


def worst_socket_under_tmpdir(scratch: Path) -> int:
    """The longest socket path torch or Python makes under a TMPDIR, past its end, from the
    names they use: torch_shm_manager's socket (c10::make_tempdir's "torch-shm-dir-XXXXXX",
    then manager.sock), and multiprocessing's, which DataLoader workers hand tensors over by
    (util.get_temp_dir's mkdtemp "pymp-", connection.arbitrary_address's mktemp "listener-"),
    tempfile's own random names measured here."""
    pymp = Path(tempfile.mkdtemp(prefix="pymp-", dir=scratch))
    listener = Path(tempfile.mktemp(prefix="listener-", dir=pymp))
    python = len(str(listener)) - len(str(scratch))
    torch_shm = len("/torch-shm-dir-XXXXXX/manager.sock")
    return max(python, torch_shm)


def test_a_local_trainers_tmpdir_leaves_room_for_its_sockets_in_a_clone_under_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: as root from a clone under /root, attempts live under /var/lib/gpujobs/<hash>
    (Settings.trainer_home_dir) and `<attempt>/work/tmp` took 88 of a socket path's 107."""
    worst = worst_socket_under_tmpdir(tmp_path)
    assert TMPDIR_MAX + worst <= SOCKET_PATH_MAX
    monkeypatch.setattr(api.settings, "TRAINER_HOMES", Path("/var/lib/gpujobs"))  # the default
    attempts = Settings(home=Path("/root/gpujobs/.gpujobs")).trainer_home_dir() / "attempts"
    work = str(attempts / str(uuid.uuid4()) / "work")
    directory = tmp_path / "attempt"
    directory.mkdir()

    scratch = prepare_scratch(directory, identity=None)
    try:
        env = trainer_environment(
            request(), run_config={}, home=work, tmpdir=str(scratch), host=Host(server_environ={})
        )
        assert env["HOME"] == work
        assert len(env["TMPDIR"]) + worst <= SOCKET_PATH_MAX
        assert scratch.stat().st_mode & 0o777 == 0o700
    finally:
        remove_scratch(directory)
    assert not scratch.exists()
    with pytest.raises(ValueError, match="TMPDIR"):  # the home's own tmp would not do
        trainer_environment(request(), run_config={}, home=work)


def test_a_trainer_pods_tmpdir_leaves_room_for_its_sockets(tmp_path: Path) -> None:
    manifests = build_manifests(request(), KubernetesLauncherConfig(namespace="ml"))

    env = {var.name: var.value for var in manifests.job.spec.template.spec.containers[0].env}

    assert len(env["TMPDIR"]) + worst_socket_under_tmpdir(tmp_path) <= SOCKET_PATH_MAX

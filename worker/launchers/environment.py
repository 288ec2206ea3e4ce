"""What a trainer sees: an environment built from an allowlist, never inherited from the server.

The server's own environment holds the admin token, the database URL and its S3 keys; a trainer
runs a team's code, so it gets only what it needs, in three layers (a later one wins):

1. the team's `spec.env`, minus anything that changes how a process loads code or reaches the
   platform (the API refuses those keys at submit; this is the same rule once more, below it);
2. the few variables torch, NCCL, CUDA and OpenMP need, passed through from the server by exact
   name or prefix (the operator's tuning, never a secret);
3. the platform's own: the run config (which carries the API URL and the checkpoint URI), the
   job-scoped token, the S3 endpoint and the trainer's S3 credentials, safe LANG, LC_ALL, TZ,
   and the process's identity and scratch space (`home_environment`).

Both launchers call `trainer_environment`; a Kubernetes pod gets its token from a Secret and its
PATH from its image, so those parts are optional.

A trainer may run under a uid with no passwd entry (the local launcher's per-job uids, a pod's
`runAsUser`, OpenShift's random uids). Whatever asks the system who or where the user is then
fails: `getpass.getuser()` (torch calls it on the CUDA path, for its kernel caches),
`Path.home()` and every cache that derives from it. So a trainer is told: USER and LOGNAME,
a HOME it owns, a TMPDIR and the caches of torch, Triton, inductor and CUDA inside that home.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpujobs.runtime import ENV_JOB_TOKEN
from worker.launchers.base import LaunchRefused, LaunchRequest
from worker.storage_credentials import S3Credentials

# From the server, by exact name: device selection, thread counts, the loader path of a CUDA
# install outside the default one. An operator's settings, not secrets.
PASSTHROUGH_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "LD_LIBRARY_PATH",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "GLOO_SOCKET_IFNAME",
    }
)
# From the server, by prefix: torch's, NCCL's and CUDA's own tuning knobs.
PASSTHROUGH_PREFIXES = ("NCCL_", "TORCH_", "CUDA_", "PYTORCH_")

# A team's variable: a plain upper-case name...
USER_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")
# ...that neither changes how the process loads code (the dynamic loader, Python, the shell,
# plugins NCCL loads) nor reaches the platform's or a cloud's credentials.
REFUSED_USER_PREFIXES = (
    "LD_",
    "PYTHON",
    "GPUJOBS_",
    "AWS_",
    "GOOGLE_",
    "AZURE_",
    "NCCL_NET_",
    "MALLOC_",
    "OPENSSL_",
)
REFUSED_USER_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TMPDIR",
        "BASH_ENV",
        "ENV",
        "IFS",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "TZDIR",
        "NLSPATH",
        "LOCPATH",
        "HOSTALIASES",
        "RESOLV_HOST_CONF",
        "MALLOC_CONF",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "TORCH_EXTENSIONS_DIR",
        "CUDA_CACHE_PATH",
        "XDG_CACHE_HOME",
        "TORCH_HOME",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
    }
)

# A socket's path holds at most 107 characters (AF_UNIX: sun_path is 108 bytes with its NUL).
SOCKET_PATH_MAX = 107
# The longest socket path a trainer's torch makes under its TMPDIR: torch_shm_manager's (the
# file_system sharing strategy). Python's multiprocessing, through which DataLoader workers hand
# tensors over, makes "/pymp-XXXXXXXX/listener-XXXXXXXX" there, two shorter. Past the limit a
# worker raises `OSError: AF_UNIX path too long` and the loader retries forever.
SOCKET_UNDER_TMPDIR = "/torch-shm-dir-XXXXXX/manager.sock"
TMPDIR_MAX = SOCKET_PATH_MAX - len(SOCKET_UNDER_TMPDIR)

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SAFE_LOCALE = "C.UTF-8"
TRAINER_USER = "trainer"  # USER and LOGNAME: what getpass.getuser() answers without a passwd entry


@dataclass(frozen=True)
class Host:
    """A process on this machine (the local launcher): a fixed PATH, the import path the
    operator configured for allowed workload modules, and the server's environment to pick the
    passthrough variables from."""

    server_environ: Mapping[str, str]
    bin_dir: str = ""  # the trainer interpreter's directory, first on PATH
    python_path: str = ""


def unholdable(env: Mapping[str, str]) -> str | None:
    """Why no process environment can hold a team's `env`, or None. Its keys passed
    `user_key_allowed` (no `=`, no NUL); a value is a NUL-terminated string to execve. The API
    refuses a NUL at submit; a spec stored before it did reaches the launch, which must fail
    the job rather than be retried."""
    for key, value in env.items():
        if "\0" in value:
            return f"env.{key}: the value holds a NUL character, which no environment can hold"
    return None


def user_key_allowed(key: str) -> bool:
    if not USER_KEY.match(key) or key in REFUSED_USER_NAMES:
        return False
    return not key.startswith(REFUSED_USER_PREFIXES)


def passthrough(server_environ: Mapping[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in server_environ.items()
        if key in PASSTHROUGH_NAMES or key.startswith(PASSTHROUGH_PREFIXES)
    }


def home_environment(home: str, *, tmpdir: str | None = None) -> dict[str, str]:
    """Who the trainer is and where it may write, whatever its uid: everything inside `home`,
    a directory of its own (the trainer creates the subdirectories: trainer.scratch), but
    `tmpdir` where a launcher gives one: a short path of the trainer's own, when `home` leaves
    too little room for a socket's path under `<home>/tmp` (TMPDIR_MAX)."""
    tmp = tmpdir or f"{home}/tmp"
    if len(tmp) > TMPDIR_MAX:
        raise ValueError(
            f"a trainer's TMPDIR {tmp!r} has {len(tmp)} characters: the sockets torch makes "
            f"under it need it at most {TMPDIR_MAX}"
        )
    cache = f"{home}/.cache"
    return {
        "USER": TRAINER_USER,
        "LOGNAME": TRAINER_USER,
        "HOME": home,
        "TMPDIR": tmp,
        "XDG_CACHE_HOME": cache,
        "TORCH_HOME": f"{cache}/torch",
        "TRITON_CACHE_DIR": f"{cache}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",
        "CUDA_CACHE_PATH": f"{cache}/nv",
    }


def trainer_environment(
    request: LaunchRequest,
    *,
    run_config: Mapping[str, str],
    home: str,
    tmpdir: str | None = None,
    include_token: bool = True,
    s3: S3Credentials | None = None,
    host: Host | None = None,
) -> dict[str, str]:
    """The trainer's whole environment. `run_config` is `{GPUJOBS_RUN_CONFIG: path}` or
    `{GPUJOBS_RUN_CONFIG_JSON: json}`; `home` a directory the trainer's uid owns, `tmpdir`
    another (default: `<home>/tmp`); `include_token=False` where the token comes from a Secret;
    `host` only for a process on this machine. Raises LaunchRefused for a spec.env no
    environment can hold."""
    env = {key: value for key, value in request.env.items() if user_key_allowed(key)}
    refusal = unholdable(env)
    if refusal is not None:
        raise LaunchRefused(refusal)
    platform: dict[str, str] = {
        "PYTHONUNBUFFERED": "1",
        "LANG": SAFE_LOCALE,
        "LC_ALL": SAFE_LOCALE,
        "TZ": "UTC",
        **home_environment(home, tmpdir=tmpdir),
        **run_config,
    }
    if include_token:
        platform[ENV_JOB_TOKEN] = request.job_token
    if request.run_config.s3_endpoint_url:
        platform["AWS_ENDPOINT_URL"] = request.run_config.s3_endpoint_url
    if s3 is not None:
        platform.update(s3.variables())
    if host is not None:
        env.update(passthrough(host.server_environ))
        platform["PATH"] = f"{host.bin_dir}:{SAFE_PATH}" if host.bin_dir else SAFE_PATH
        # The user's site-packages would be HOME's, the attempt's own directory: nothing there.
        platform["PYTHONNOUSERSITE"] = "1"
        if host.python_path:
            platform["PYTHONPATH"] = host.python_path
    env.update(platform)
    return env

"""The trainer's identity and scratch space, whatever uid it runs as.

A launcher names them in the environment (worker.launchers.environment.home_environment): USER,
HOME, TMPDIR and the caches of torch, Triton, inductor and CUDA, all inside a home of the
trainer's own. This creates the directories (a fresh home is empty; `tempfile` silently falls
back to a shared /tmp and Triton fails outright when theirs is missing) and, where no launcher
said who the user is and the uid has no passwd entry, names it: torch calls
`getpass.getuser()` on the CUDA path, which raises for such a uid.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import MutableMapping

DIRECTORY_VARIABLES = (
    "TMPDIR",
    "XDG_CACHE_HOME",
    "TORCH_HOME",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "CUDA_CACHE_PATH",
)


def prepare(environ: MutableMapping[str, str] | None = None) -> None:
    env = os.environ if environ is None else environ
    if not (env.get("USER") or env.get("LOGNAME")):
        try:
            pwd.getpwuid(os.getuid())
        except KeyError:
            env["USER"] = env["LOGNAME"] = f"uid{os.getuid()}"
    for key in DIRECTORY_VARIABLES:
        path = env.get(key)
        if path:
            os.makedirs(path, mode=0o700, exist_ok=True)

"""A workload that asks the system who and where it is, as torch does on the CUDA path.

Run as a uid with no passwd entry (the local launcher's per-job uids; a pod's `runAsUser`), each
of these raised or wrote outside the trainer's own directory: `getpass.getuser()` (torch calls
it for its kernel caches: the first GPU run failed there), `Path.home()`, `tempfile`, and the
cache directories of torch hub, inductor and Triton. Each answer goes into `anyuid-<rank>.json`
in the working directory; any failure fails the attempt. Then it trains, for real.
"""

from __future__ import annotations

import getpass
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from tests.worker.hostile import linear
from trainer.workloads import Workload


def _written(directory: str) -> str:
    """Write a file in `directory` (created if missing, as the caches do) and say where."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    handle, path = tempfile.mkstemp(dir=directory)
    os.close(handle)
    return path


def answers() -> dict[str, Any]:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    try:
        import pwd

        passwd: str | None = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        passwd = None
    handle, temporary = tempfile.mkstemp()
    os.close(handle)
    return {
        "uid": os.getuid(),
        "passwd_entry": passwd,
        "user": getpass.getuser(),
        "home": str(Path.home()),
        "home_file": _written(str(Path.home())),
        "tempfile": temporary,
        "torch_hub": _written(torch.hub.get_dir()),
        "inductor_cache": _written(cache_dir()),
        "triton_cache": _written(os.environ.get("TRITON_CACHE_DIR") or _triton_default()),
    }


def _triton_default() -> str:
    # What Triton uses without the variable: a folder of the home's.
    return os.path.join(Path.home(), ".triton", "cache")


def build(args: dict[str, Any]) -> Workload:
    rank = os.environ.get("RANK", "0")
    Path(f"anyuid-{rank}.json").write_text(json.dumps(answers(), sort_keys=True))

    return linear()

"""What the local launcher's tests need when they run as root, where trainers run as other uids.

An unprivileged uid must reach the interpreter and every directory a trainer works in. pytest's
`tmp_path` lives under a 0700 `/tmp/pytest-of-root`, and an interpreter installed under a 0700
`/root` (pyenv) cannot be executed by anyone else. Tests then use `open_directory()` and
`trainer_python()`; where the interpreter is reachable (not root, or installed elsewhere, as in
the images and CI), `trainer_python()` is just `sys.executable`.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
import tempfile
from functools import lru_cache
from pathlib import Path

from worker.launchers.interpreter import trainer_interpreter


def open_directory() -> Path:
    """A fresh directory that other users may pass through (not list); the caller removes it."""
    path = Path(tempfile.mkdtemp(prefix="gpujobs-test-"))
    path.chmod(0o711)
    return path


@lru_cache
def trainer_python() -> str:
    """An interpreter an unprivileged uid can run, with this virtualenv's packages (the product's
    own choice, built once per machine under /tmp for the tests)."""
    ours = sysconfig.get_paths()["purelib"]
    key = hashlib.sha256(f"{sys.executable}\0{ours}".encode()).hexdigest()[:12]
    return trainer_interpreter(Path(tempfile.gettempdir()) / f"gpujobs-trainer-python-{key}")

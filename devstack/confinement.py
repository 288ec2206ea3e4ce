"""What the local launcher's tests need when they run as root, where trainers run as other uids.

An unprivileged uid must reach the interpreter, the code and every directory a trainer works in.
pytest's `tmp_path` lives under a 0700 `/tmp/pytest-of-root`, an interpreter installed under a
0700 `/root` (pyenv) cannot be executed by anyone else, and a checkout cloned under `/root` cannot
be read. Tests then use `open_directory()` and the product's own trainer runtime
(worker/launchers/runtime.py), laid out once per machine under /tmp with the test workloads
(`tests`) and the stack's corpus (`api`) besides the trainer's packages. Where everything is
reachable (not root, or a checkout in an open folder), the runtime is the server's interpreter
and the checkout.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
import tempfile
from functools import lru_cache
from pathlib import Path

from worker.launchers.runtime import TRAINER_PACKAGES, TrainerRuntime, trainer_runtime

ROOT = Path(__file__).resolve().parents[1]
# What test trainers import or read besides the trainer: the test workloads and the stack's corpus.
TEST_PACKAGES = (*TRAINER_PACKAGES, "tests", "api")


def open_directory() -> Path:
    """A fresh directory that other users may pass through (not list); the caller removes it."""
    path = Path(tempfile.mkdtemp(prefix="gpujobs-test-"))
    path.chmod(0o711)
    return path


@lru_cache
def trainer_runtime_for_tests() -> TrainerRuntime:
    """The runtime test trainers run on: the operator's workload folder is the checkout."""
    ours = sysconfig.get_paths()["purelib"]
    key = hashlib.sha256(f"{sys.executable}\0{ours}\0{ROOT}".encode()).hexdigest()[:12]
    return trainer_runtime(
        Path(tempfile.gettempdir()) / f"gpujobs-trainer-runtime-{key}",
        python_path=str(ROOT),
        packages=TEST_PACKAGES,
    )


def trainer_python() -> str:
    return trainer_runtime_for_tests().python


def trainer_python_path() -> str:
    """The PYTHONPATH test trainers import the test workloads from."""
    return trainer_runtime_for_tests().python_path


def reachable_package(name: str) -> Path:
    """Where trainers find package `name` of this checkout: the runtime's copy, if it made one
    (`<version>/code`, beside the interpreter's `<version>/python/bin/python`)."""
    copied = Path(trainer_python()).parents[2] / "code" / name
    return copied if (copied / "__init__.py").exists() else ROOT / name

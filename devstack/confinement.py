"""What the local launcher's tests need when they run as root, where trainers run as other uids.

An unprivileged uid must reach the interpreter and every directory a trainer works in. pytest's
`tmp_path` lives under a 0700 `/tmp/pytest-of-root`, and an interpreter installed under a 0700
`/root` (pyenv) cannot be executed by anyone else. Tests then use `open_directory()` and
`trainer_python()`; where the interpreter is reachable (not root, or installed elsewhere, as in
the images and CI), `trainer_python()` is just `sys.executable`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from functools import lru_cache
from pathlib import Path

from worker.launchers.identity import Identity, reachable

SOMEONE_ELSE = Identity(uid=2_000_000_000, gid=2_000_000_000)


def open_directory() -> Path:
    """A fresh directory that other users may pass through (not list); the caller removes it."""
    path = Path(tempfile.mkdtemp(prefix="gpujobs-test-"))
    path.chmod(0o711)
    return path


def usable_by_others(executable: str) -> bool:
    path = Path(executable).resolve()
    return reachable(path, SOMEONE_ELSE) and bool(path.stat().st_mode & 0o001)


@lru_cache
def trainer_python() -> str:
    """An interpreter an unprivileged uid can run, with this virtualenv's packages.

    If ours is out of reach, a virtualenv on a reachable interpreter of the same version whose
    site-packages adds ours (same ABI, so torch's extensions load)."""
    if os.geteuid() != 0 or usable_by_others(sys.executable):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = next(
        (
            candidate
            for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}")
            if Path(candidate).exists() and usable_by_others(candidate)
        ),
        None,
    )
    if base is None:
        raise RuntimeError(
            f"{sys.executable} is out of reach of unprivileged users and there is no "
            f"/usr/bin/{version}: trainers cannot run as another uid on this machine"
        )
    ours = sysconfig.get_paths()["purelib"]
    key = hashlib.sha256(f"{base}\0{ours}".encode()).hexdigest()[:12]
    venv = Path(tempfile.gettempdir()) / f"gpujobs-trainer-python-{key}"
    python = venv / "bin" / "python"
    if not python.exists():
        building = Path(tempfile.mkdtemp(prefix=f"{venv.name}.", dir=venv.parent))
        subprocess.run([base, "-m", "venv", "--without-pip", str(building)], check=True)
        site = building / "lib" / version / "site-packages"
        (site / "gpujobs-test-bridge.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
        building.chmod(0o755)
        try:
            building.rename(venv)
        except OSError:  # another session built it meanwhile
            shutil.rmtree(building, ignore_errors=True)
    return str(python)

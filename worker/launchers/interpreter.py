"""An interpreter the job's unprivileged uid can run, with the server's packages.

Run as root, the local launcher starts trainers as other uids (docs/security.md), so they need an
interpreter outside any private directory. A virtualenv made from pyenv under a 0700 `/root` is
out of their reach; then a virtualenv on the system's interpreter of the same version, whose
site-packages adds ours (same ABI, so torch's extensions load), is built once under the server's
home and used instead. Anywhere else (not root, images, CI machines) it is `sys.executable`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from worker.launchers.identity import Identity, reachable

SOMEONE_ELSE = Identity(uid=2_000_000_000, gid=2_000_000_000)


def usable_by_others(executable: str) -> bool:
    path = Path(executable).resolve()
    return reachable(path, SOMEONE_ELSE) and bool(path.stat().st_mode & 0o001)


def trainer_interpreter(directory: Path) -> str:
    """`sys.executable` when other uids can run it; otherwise a bridge virtualenv in
    `directory` (which must itself be reachable), built on first use."""
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
            f"/usr/bin/{version}: set GPUJOBS_TRAINER_PYTHON to an interpreter they can run"
        )
    directory = directory.absolute()  # trainers start in their own directories
    python = directory / "bin" / "python"
    if python.exists():
        return str(python)
    directory.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    subprocess.run([base, "-m", "venv", "--without-pip", str(building)], check=True)
    site = building / "lib" / version / "site-packages"
    ours = sysconfig.get_paths()["purelib"]
    (site / "gpujobs-bridge.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    building.chmod(0o755)
    try:
        building.rename(directory)
    except OSError:  # another process built it meanwhile
        shutil.rmtree(building, ignore_errors=True)
    return str(python)

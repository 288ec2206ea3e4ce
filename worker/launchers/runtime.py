"""What a trainer runs on: an interpreter, its packages and the trainer's code, all where the
job's unprivileged uid can reach them.

Run as root, the local launcher starts trainers as other uids (docs/security.md). A newcomer who
clones into `/root` (mode 0700) as root has the server's interpreter, its virtualenv and the
checkout all out of their reach. Rather than open the user's home, the service lays out a runtime
that trainers can reach, in a directory of its own (`Settings.make_trainer_home()/runtime`):

    runtime/python/          a virtualenv on an interpreter others can run (the server's, else
                             the system's of the same version: same ABI, so torch loads)
    runtime/site-packages/   the server's packages, hard-linked (copied across file systems),
                             when their own folder is out of reach
    runtime/code/<package>/  the trainer's own packages (`gpujobs`, `trainer`), copied, when the
                             checkout is out of reach

The virtualenv's interpreter alone imports all of them (its `.pth` names both folders): whoever
runs it with no PYTHONPATH (a test's launcher, an operator's GPUJOBS_TRAINER_PYTHON) gets the
trainer, not `No module named trainer`. It is rebuilt when what it mirrors changes (a package
installed, a source file edited) and is read-only to trainers. Where everything is reachable
already (not root; images; a clone in a world-readable folder) nothing is laid out and the
server's interpreter runs trainers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from worker.launchers.identity import Identity, reachable

SOMEONE_ELSE = Identity(uid=2_000_000_000, gid=2_000_000_000)
TRAINER_PACKAGES = ("gpujobs", "trainer")
VERSION_UNUSED_S = 7 * 24 * 3600.0
BUILD_ABANDONED_S = 3600.0
FINGERPRINT = "complete"  # written last: a version without it is being built
# Part of every version's fingerprint: a change to what a version holds rebuilds the ones made
# before it (2: the interpreter's .pth names the copied code too).
LAYOUT = "2"
# An editable install's finder maps packages to the checkout; copied, it would send imports
# into a folder the trainer cannot enter (PermissionError) instead of to runtime/code. The
# packages' bytecode stays: trainers cannot write it, and without it `import torch` takes
# seconds more at every start and restart.
SITE_SKIPPED = shutil.ignore_patterns("__editable__*")
CODE_SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc")


class RuntimeUnavailable(RuntimeError):
    """No interpreter that other uids can run could be found: the operator must name one."""


@dataclass(frozen=True)
class TrainerRuntime:
    python: str  # runs the trainer
    python_path: str  # its PYTHONPATH: the operator's workload modules (the code is `python`'s)


def usable_by_others(executable: str) -> bool:
    path = Path(executable).absolute()
    resolved = path.resolve()
    return (
        reachable(path, SOMEONE_ELSE)
        and reachable(resolved, SOMEONE_ELSE)
        and bool(resolved.stat().st_mode & 0o001)
    )


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RuntimeUnavailable(f"package {name} is not importable by the server")
    return Path(spec.origin).parent


def trainer_runtime(
    directory: Path,
    *,
    python: str = "",
    python_path: str = "",
    packages: Sequence[str] = TRAINER_PACKAGES,
) -> TrainerRuntime:
    """The runtime trainers use. `python`: the operator's interpreter (used as it is);
    `python_path`: the operator's folders of allowed workload modules; `packages`: what
    trainers import from the server's installation."""
    if python or os.geteuid() != 0:
        return TrainerRuntime(python=python or sys.executable, python_path=python_path)
    site = Path(sysconfig.get_paths()["purelib"])
    hidden = [name for name in packages if not _reachable_tree(package_dir(name))]
    if usable_by_others(sys.executable) and _reachable_tree(site) and not hidden:
        return TrainerRuntime(python=sys.executable, python_path=python_path)
    built = _lay_out(directory.absolute(), site=site, hidden=hidden)
    return TrainerRuntime(python=str(built / "python" / "bin" / "python"), python_path=python_path)


def _reachable_tree(path: Path) -> bool:
    return reachable(path / "x", SOMEONE_ELSE)  # the folder itself and every one above it


def _lay_out(root: Path, *, site: Path, hidden: list[str]) -> Path:
    """`root/<fingerprint>`, built unless it exists. A version is never changed in place (a
    running trainer imports lazily from it); one superseded for a week goes (_prune)."""
    site_hidden = not _reachable_tree(site)
    version = root / _fingerprint(site=site, site_hidden=site_hidden, hidden=hidden)[:16]
    if (version / FINGERPRINT).exists():
        return version
    if not root.is_dir():
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
        root.chmod(0o755)
    building = Path(tempfile.mkdtemp(prefix=".building.", dir=root))
    try:
        packages = site
        if site_hidden:
            packages = version / "site-packages"
            shutil.copytree(
                site, building / "site-packages", symlinks=True, ignore=SITE_SKIPPED,
                copy_function=_link_or_copy,
            )  # fmt: skip
        for name in hidden:
            shutil.copytree(package_dir(name), building / "code" / name, ignore=CODE_SKIPPED)
        _virtualenv(
            building / "python", packages=packages, code=version / "code" if hidden else None
        )
        _read_only_to_others(building)
        (building / FINGERPRINT).write_text(version.name)
        building.chmod(0o755)
        try:
            os.rename(building, version)
        except OSError:  # another process built the same version meanwhile
            if not (version / FINGERPRINT).exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    _prune(root, keep=version)
    return version


def _prune(root: Path, *, keep: Path) -> None:
    """Versions superseded for a week, and builds a crash left behind. A trainer imports lazily
    from the version it started on for as long as it runs, so versions go by age, not by count
    (two restarts with edits between would have removed one a trainer still used)."""
    now = time.time()
    for entry in root.iterdir():
        if entry == keep or not entry.is_dir() or entry.is_symlink():
            continue
        age = now - entry.stat().st_mtime
        building = entry.name.startswith(".building.")
        if age > (BUILD_ABANDONED_S if building else VERSION_UNUSED_S):
            shutil.rmtree(entry, ignore_errors=True)


def _virtualenv(target: Path, *, packages: Path, code: Path | None) -> None:
    """A virtualenv that sees `code` (the copied packages) and `packages`, by their final paths,
    where they will be once in place. `code` ahead of the rest, where PYTHONPATH used to put it:
    no other copy of those packages (an install in `packages`) is imported instead."""
    base = _base_interpreter()
    subprocess.run([base, "-m", "venv", "--without-pip", str(target)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    bridge = target / "lib" / version / "site-packages" / "gpujobs-runtime.pth"
    first = f"import sys; sys.path.insert(0, {str(code)!r})\n" if code is not None else ""
    bridge.write_text(f"{first}import site; site.addsitedir({str(packages)!r})\n")


def _base_interpreter() -> str:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = (
        str(Path(sys.executable).resolve()),
        f"/usr/bin/{version}",
        f"/usr/local/bin/{version}",
    )
    for candidate in candidates:
        if Path(candidate).exists() and usable_by_others(candidate):
            return candidate
    raise RuntimeUnavailable(
        f"trainers run as unprivileged uids and none of them can run {sys.executable}, and "
        f"there is no {version} they can: install Debian's {version} (apt-get install "
        f"{version}-venv) or set GPUJOBS_TRAINER_PYTHON to an interpreter outside a private "
        "folder"
    )


def _fingerprint(*, site: Path, site_hidden: bool, hidden: Iterable[str]) -> str:
    """What the runtime mirrors: the interpreter, the installed distributions, and every source
    file of the copied packages (so an edit to the trainer reaches the next start)."""
    digest = hashlib.sha256(f"{LAYOUT}\0{sys.executable}\0{site}\0{site_hidden}".encode())
    if site_hidden:
        for entry in sorted(os.listdir(site)):
            digest.update(entry.encode() + b"\0")
    for name in hidden:
        root = package_dir(name)
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            info = path.stat()
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def _link_or_copy(source: str, target: str) -> str:
    """A hard link shares the file: only for one no other user may write, else a copy that is
    made read-only to them (a venv installed under umask 000 would let a trainer edit the
    server's own packages through the link)."""
    mode = os.stat(source).st_mode
    if not mode & 0o022:
        try:
            os.link(source, target)
            return target
        except OSError:  # another file system
            pass
    shutil.copy2(source, target)  # its mode is made safe with the rest (_read_only_to_others)
    return target


def _read_only_to_others(tree: Path) -> None:
    """No file or folder of a runtime that every job imports from may be writable by a job."""
    for folder, folders, files in os.walk(tree):
        for name in (*folders, *files):
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o022:
                os.chmod(path, stat.S_IMODE(mode) & ~0o022)

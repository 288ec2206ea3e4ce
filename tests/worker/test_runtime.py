"""The runtime trainers run on, laid out where their uids reach it (worker/launchers/runtime.py):
a package in a folder only root may enter is copied into it, importable by another uid, and
laid out anew when its source changes, without touching a version a trainer may still use."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.confinement import open_directory, trainer_python
from worker.launchers.runtime import trainer_runtime

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs trainers as other uids")

UID = 299_998


@pytest.fixture
def private_package(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`gpujobs_probe`, importable by this process from a 0700 folder, as a checkout under /root."""
    private = Path(tempfile.mkdtemp(prefix="gpujobs-private-"))
    package = private / "gpujobs_probe"
    package.mkdir()
    (package / "__init__.py").write_text("WHO = 'first'\n")
    monkeypatch.syspath_prepend(str(private))
    importlib.invalidate_caches()
    yield package
    sys.modules.pop("gpujobs_probe", None)
    shutil.rmtree(private, ignore_errors=True)


def run_as_another_uid(
    python: str, python_path: str, code: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code], env={"PYTHONPATH": python_path}, user=UID, group=UID,
        extra_groups=[], cwd="/", capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_package_out_of_reach_is_laid_out_where_another_uid_imports_it(
    private_package: Path,
) -> None:
    base = open_directory()
    try:
        probe = "import gpujobs_probe; print(gpujobs_probe.WHO)"
        hidden = run_as_another_uid(trainer_python(), str(private_package.parent), probe)
        assert hidden.returncode != 0  # the attack surface of issue 23: out of the uid's reach

        first = trainer_runtime(base / "runtime", packages=("gpujobs_probe",))
        # The interpreter alone imports it: a launcher given only that failed (issue 37).
        assert first.python_path == ""
        seen = run_as_another_uid(first.python, "", probe)
        assert seen.returncode == 0, seen.stderr
        assert seen.stdout.strip() == "first"
        assert oct((private_package.parent).stat().st_mode & 0o777) == "0o700"  # still private

        (private_package / "__init__.py").write_text("WHO = 'second'\n")
        os.utime(private_package / "__init__.py", ns=(1, 1))  # a changed file, whatever the clock
        second = trainer_runtime(base / "runtime", packages=("gpujobs_probe",))
        assert second.python != first.python
        assert Path(first.python).parent.parent.exists()  # the previous version stays for its users
        again = run_as_another_uid(second.python, "", probe)
        assert again.stdout.strip() == "second", again.stderr
        assert trainer_runtime(base / "runtime", packages=("gpujobs_probe",)) == second
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_what_trainers_share_is_read_only_to_them_and_old_builds_go(private_package: Path) -> None:
    (private_package / "__init__.py").chmod(0o666)  # a checkout made under umask 000
    base = open_directory()
    try:
        abandoned = base / "runtime" / ".building.crashed"
        superseded = base / "runtime" / "0123456789abcdef"
        for folder in (abandoned, superseded):
            folder.mkdir(parents=True)
            os.utime(folder, (1, 1))

        runtime = trainer_runtime(base / "runtime", packages=("gpujobs_probe",))

        copied = Path(runtime.python).parents[2] / "code" / "gpujobs_probe" / "__init__.py"
        assert copied.stat().st_mode & 0o022 == 0
        write = f"open({str(copied)!r}, 'a').write('WHO = 0')"
        refused = run_as_another_uid(runtime.python, runtime.python_path, write)
        assert refused.returncode != 0 and "Permission" in refused.stderr
        assert not abandoned.exists() and not superseded.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)

"""The api and worker Dockerfiles: checked statically (no Docker engine here) plus the one thing
that can run without one: `alembic upgrade head` from the api image's WORKDIR layout."""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.support import REPO

DOCKERFILES = {"api": REPO / "docker/api.Dockerfile", "worker": REPO / "docker/worker.Dockerfile"}
ENTRY_POINTS = ("api.main", "worker.api_app", "worker.celery_app", "trainer.__main__")


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if not current and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            logical.append(current.strip())
        current = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def _dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    return any(
        fnmatch.fnmatch(path, pattern) or path.startswith(pattern.rstrip("/") + "/")
        for pattern in patterns
    )


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_dockerfile_basics(image: str) -> None:
    steps = _instructions(DOCKERFILES[image])
    bases = [args for op, args in steps if op == "FROM"]
    assert bases, "no FROM"
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in [
        f"ARG {args}" for op, args in steps if op == "ARG"
    ]
    assert all(base.split()[0] == "${PYTHON_IMAGE}" for base in bases)
    # The final stage runs as an unprivileged, numeric user (Kubernetes runAsNonRoot can verify).
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM") :]
    users = [args for op, args in final if op == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    # Installs the server extra from the project, with dependencies in a layer of their own.
    runs = " ".join(args for op, args in steps if op == "RUN")
    assert "optional-dependencies']['server']" in runs or "for e in sys.argv[1:]" in runs
    assert "pip install --no-deps ." in runs
    assert "CMD" in [op for op, _ in final]


def test_api_image_has_a_healthcheck_and_migrations() -> None:
    steps = _instructions(DOCKERFILES["api"])
    healthchecks = [args for op, args in steps if op == "HEALTHCHECK"]
    assert healthchecks and "/healthz" in healthchecks[0]
    copies = [args for op, args in steps if op == "COPY"]
    assert "alembic.ini ./" in copies and "migrations ./migrations" in copies
    (cmd,) = [args for op, args in steps if op == "CMD"]
    assert '"python", "-m", "worker.api_app"' in cmd


def test_torch_is_pinned_and_the_trainer_has_cpu_and_cuda_variants() -> None:
    """One torch everywhere (the version the venv and CI use); the trainer picks its build by a
    build arg: CPU (default) or a CUDA index such as cu128; a served local wheel when given."""
    pinned = "ARG TORCH_VERSION=2.13.0"
    trainer = (REPO / "docker/trainer.Dockerfile").read_text()
    worker = DOCKERFILES["worker"].read_text()
    install = (REPO / "docker/install-torch.sh").read_text()
    for text in (trainer, worker):
        assert pinned in text
        assert "ARG TORCH_VARIANT=cpu" in text
        assert "download.pytorch.org/whl/${TORCH_VARIANT}" in text
        assert "ARG TORCH_FIND_LINKS=" in text
        assert not re.search(r"torch\s*>=", text), "an open torch range pulls the CUDA build"
    assert '"torch==$TORCH_VERSION"' in install
    assert '"torch==$TORCH_VERSION+$TORCH_VARIANT"' in install
    steps = _instructions(REPO / "docker/trainer.Dockerfile")
    # No wheel file is copied into any layer: it is served to the build over loopback.
    assert not any(op in ("COPY", "ADD") and ".whl" in args for op, args in steps)
    assert ("ENTRYPOINT", '["python", "-m", "trainer"]') in steps
    assert ("LABEL", "org.gpujobs.torch-variant=${TORCH_VARIANT}") in steps


def test_worker_image_can_add_the_trainer() -> None:
    steps = _instructions(DOCKERFILES["worker"])
    assert "INSTALL_TRAINER=0" in [args for op, args in steps if op == "ARG"]
    assert "server trainer" in " ".join(args for op, args in steps if op == "RUN")


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_copied_sources_exist_and_are_not_dockerignored(image: str) -> None:
    patterns = _dockerignore()
    for op, args in _instructions(DOCKERFILES[image]):
        if op != "COPY" or args.startswith("--from"):
            continue
        for source in args.split()[:-1]:
            if "*" in source:  # optional files such as README.md*
                continue
            assert (REPO / source).exists(), f"{image}: COPY {source}: no such path in the repo"
            assert not _ignored(source, patterns), f"{image}: {source} is in .dockerignore"


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = _dockerignore()
    for path in (".git", ".venv", "tests", ".gpujobs"):
        assert _ignored(path, patterns), path


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_image_entry_points_exist(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, (
        f"{module} is what the images and the chart run; it must exist in the package"
    )


def test_migrations_run_from_the_installed_wheel(tmp_path: Path) -> None:
    """What the images hold: the project installed from its wheel, no checkout, no alembic.ini.
    `python -m api.admin migrate` (and create-team, which migrates first) must find the migrations
    inside the installed distribution."""
    wheels, target, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("gpujobs-*.whl")
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert installed.returncode == 0, installed.stderr
    assert sorted(p.name for p in (target / "migrations/versions").glob("*.py")) == sorted(
        p.name for p in (REPO / "migrations/versions").glob("*.py")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    # The wheel's copy comes first on sys.path, ahead of the checkout's editable install.
    env["PYTHONPATH"] = str(target)
    env["GPUJOBS_HOME"] = str(tmp_path / "home")
    env["GPUJOBS_DATABASE_URL"] = f"sqlite:///{tmp_path / 'gpujobs.db'}"
    probe = "import api.migrate as m; print(m.migrations_dir())"
    where = subprocess.run(
        [sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()) == target / "migrations"
    result = subprocess.run(
        [sys.executable, "-m", "api.admin", "create-team", "acme"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "create-team prints the team's token"


def test_migrations_run_from_the_api_image_layout(tmp_path: Path) -> None:
    """The image has only alembic.ini and migrations/ in its WORKDIR; the code is installed."""
    workdir = tmp_path / "app"
    workdir.mkdir()
    shutil.copy(REPO / "alembic.ini", workdir)
    shutil.copytree(REPO / "migrations", workdir / "migrations")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env.pop("PYTHONPATH", None)
    env["GPUJOBS_HOME"] = str(tmp_path / "home")
    env["GPUJOBS_DATABASE_URL"] = f"sqlite:///{tmp_path / 'gpujobs.db'}"
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"Running upgrade .* -> \w+", result.stderr)

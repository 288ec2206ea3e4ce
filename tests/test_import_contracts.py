"""The import contracts of `make test` (`lint-imports`, `[tool.importlinter]` in pyproject.toml)
break on what they are there to stop. Each case plants one import in a copy of the code and runs
`lint-imports` on the copy: a new cycle between two of api's packages, a database import in the
pure placement code (in a module it has and in a new one), shipped code importing devstack. The
copy as it is keeps every contract, so each break is the planted import's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS: list[dict[str, Any]] = CONFIG["contracts"]


def named(contracts: list[dict[str, Any]]) -> str:
    (found,) = contracts
    return str(found["name"])


ACYCLIC = named([c for c in CONTRACTS if c["type"] == "acyclic_siblings"])
LAYERS = [c for c in CONTRACTS if c["type"] == "layers"]
PACKAGES = named([c for c in LAYERS if c["layers"][0] == "tests"])
DOMAINS = named([c for c in LAYERS if c["layers"][-1] == "api.pricing"])
TIERS = named([c for c in LAYERS if c["layers"][0].startswith("api.main")])
FORBIDDEN = [c for c in CONTRACTS if c["type"] == "forbidden"]
PURE_PLACEMENT = named([c for c in FORBIDDEN if "api.placement.*" in c["source_modules"]])
SHIPPED = named([c for c in FORBIDDEN if "devstack" in c["forbidden_modules"]])
LAUNCHER_INTERFACE = named([c for c in FORBIDDEN if "worker.launchers.base" in c["source_modules"]])


def not_source(folder: str, names: list[str]) -> list[str]:
    """What copytree leaves out: all but Python files and the folders that may hold them."""
    return [
        name
        for name in names
        if name == "__pycache__" or not (name.endswith(".py") or Path(folder, name).is_dir())
    ]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The root packages and pyproject.toml, copied."""
    for package in CONFIG["root_packages"]:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=not_source)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the copy: its packages first on the path, no cache (grimp's cache may
    serve a graph of the files as they were), one contract a line (COLUMNS)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "1000"}
    command = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", command, "--no-cache", "--no-logo", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def broken(result: subprocess.CompletedProcess[str]) -> set[str]:
    """The names of the contracts the run reports broken ("<name> BROKEN (3 ignored imports)")."""
    return {
        found.group(1)
        for line in result.stdout.splitlines()
        if (found := re.fullmatch(r"(.+) BROKEN( \(\d+ ignored imports?\))?", line))
    }


def plant(tree: Path, path: str, line: str) -> None:
    target = tree / path
    text = target.read_text() if target.exists() else '"""Planted by the test."""\n'
    target.write_text(text + line + "\n")


def test_the_code_as_it_is_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert broken(result) == set()


@pytest.mark.parametrize(
    ("plants", "breaks"),
    [
        pytest.param(
            # teams is below budgets; two new modules, so the cycle is the plant's alone.
            {
                "api/teams/planted.py": "from api.budgets import planted as budgets_planted",
                "api/budgets/planted.py": "from api.teams import planted as teams_planted",
            },
            {ACYCLIC, DOMAINS},
            id="cycle-between-api-packages",
        ),
        pytest.param(
            {"api/placement/policy.py": "import sqlalchemy"},
            {PURE_PLACEMENT},
            id="sqlalchemy-in-placement-policy",
        ),
        pytest.param(
            {"api/placement/planted.py": "from sqlalchemy.orm import Session"},
            {PURE_PLACEMENT},
            id="sqlalchemy-in-a-new-placement-module",
        ),
        pytest.param(
            {"api/placement/policy.py": "from api.models import Job"},
            {PURE_PLACEMENT},
            id="orm-in-placement-policy",
        ),
        pytest.param(
            # views (domain logic) sit below the repositories; no cycle, one domain.
            {"api/reservations/views.py": "from api.reservations import repository"},
            {TIERS},
            id="domain-logic-imports-a-repository",
        ),
        pytest.param(
            {"worker/planted.py": "import devstack"},
            {PACKAGES, SHIPPED},
            id="worker-imports-devstack",
        ),
        pytest.param(
            {"worker/launchers/base.py": "from api.pricing.offers import Placement"},
            {LAUNCHER_INTERFACE},
            id="launcher-interface-imports-the-api",
        ),
    ],
)
def test_a_planted_import_breaks_its_contract(
    tree: Path, plants: dict[str, str], breaks: set[str]
) -> None:
    for path, line in plants.items():
        plant(tree, path, line)
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken(result) == breaks, result.stdout

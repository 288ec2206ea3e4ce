"""A launcher is its own folders: worker/launchers/<name>/ (its code, registration and
capabilities) and api/launchers/ (its settings and what they make of it, LauncherTraits). Nothing
else branches on a launcher's name: the API and the control loop ask a trait or a capability, so a
new launcher changes no caller. This reads the shipped code for a launcher's name compared with
something (==, !=, in, a match case) or used as a mapping's key, outside those homes."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from api.launchers import LAUNCHER_GROUPS

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("gpujobs", "api", "worker", "trainer")
HOMES = (
    ROOT / "api" / "launchers",
    *(ROOT / "worker" / "launchers" / name for name in LAUNCHER_GROUPS),
)


def named(node: ast.expr | None, names: set[str]) -> bool:
    """The expression is a launcher's name, or a literal collection holding one."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(named(element, names) for element in node.elts)
    return False


def compared(node: ast.AST) -> list[ast.expr | None]:
    """What the node compares with (==, !=, in), matches on (a case) or keys by (a dict)."""
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.MatchValue):
        return [node.value]
    if isinstance(node, ast.Dict):
        return list(node.keys)
    return []


def branches_on_a_name(tree: ast.AST, names: set[str]) -> Iterator[int]:
    """The lines where the code compares with, matches on, or keys by a launcher's name."""
    for node in ast.walk(tree):
        if any(named(side, names) for side in compared(node)):
            yield getattr(node, "lineno", 0)


def outside_the_homes() -> Iterator[Path]:
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not any(path.is_relative_to(home) for home in HOMES):
                yield path


def test_no_shipped_code_outside_a_launchers_folders_branches_on_its_name() -> None:
    names = set(LAUNCHER_GROUPS)
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in outside_the_homes()
        for line in branches_on_a_name(ast.parse(path.read_text()), names)
    ]
    assert found == []


def test_the_check_finds_what_it_is_there_to_stop() -> None:
    """The forms the code had before its launchers asked traits (issue #39)."""
    names = set(LAUNCHER_GROUPS)
    planted = {
        'if settings.launcher == "local": pass': True,
        'simulated = "local" != launcher': True,
        'if launcher in ("local", "slurm"): pass': True,
        'match launcher:\n    case "kubernetes": pass': True,
        'GROUPS = {"local": object, "kubernetes": object}': True,
        'job_id = "local"': False,  # the word, not a branch on a launcher
    }
    for code, branches in planted.items():
        assert any(branches_on_a_name(ast.parse(code), names)) == branches, code

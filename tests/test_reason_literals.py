"""A stop or end reason is a value of `gpujobs.reasons`, never a string typed where it is used.

Before the enums, "migrate" was typed in the scheduler and the outcome rules, "cancel" in three
places, "standby_stuck" defined twice, and each new reason added a comparison in several files.
This test reads the shipped packages' syntax trees and fails on a reason's value written as a
string literal outside `gpujobs/reasons.py`. The few literals left are other words that happen
to be spelled alike (a command name, a launcher's own record, a sentence a person reads), each
listed with how many times it may appear in its file.
"""

from __future__ import annotations

import ast
from collections import Counter
from enum import Enum
from pathlib import Path

import pytest
from sqlalchemy import String

from api.models import JobAttempt
from gpujobs.reasons import EndReason, StopReason

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "worker", "gpujobs")
HOME = "gpujobs/reasons.py"
VALUES = frozenset(r.value for r in (*StopReason, *EndReason))

# (file, value): how often it may appear, and why it is not the reason.
ALIKE: dict[tuple[str, str], int] = {
    ("api/admin.py", "migrate"): 2,  # the admin command that applies database migrations
    ("api/placement/policy.py", "migrate"): 1,  # a decision's words, never stored as a reason
    ("gpujobs/cli/main.py", "cancel"): 1,  # the CLI's command
    ("gpujobs/cli/render.py", "preempted"): 1,  # the words of an event line
    ("worker/outcomes.py", "cancelled"): 1,  # the job's status reason, in words
    ("worker/launchers/local/launcher.py", "cancel"): 1,  # the local launcher's stop record
    ("worker/launchers/local/observe.py", "cancel"): 1,  # ... read back
    ("worker/launchers/local/record.py", "no_capacity"): 1,  # a record file's name
}


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _enum_members(tree: ast.Module) -> set[int]:
    """The values of other enums (a launcher's ObservedState): their own vocabulary."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(base, ast.Name) and base.id.endswith("Enum") for base in node.bases
        ):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
                    found.add(id(statement.value))
    return found


def reason_literals(source: str) -> Counter[str]:
    """Each reason value written as a string literal in `source`, and how often."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _enum_members(tree)
    return Counter(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in VALUES
        and id(node) not in skip
    )


def shipped_literals() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name == HOME:
                continue
            for value, count in reason_literals(path.read_text()).items():
                found[(name, value)] = count
    return found


def test_no_reason_is_a_string_literal_outside_its_enum_module() -> None:
    typed = {
        where: count for where, count in shipped_literals().items() if count > ALIKE.get(where, 0)
    }
    assert not typed, (
        "a stop or end reason typed as a string: use gpujobs.reasons.StopReason / EndReason "
        f"instead ((file, value): count): {typed}"
    )


def test_each_alike_word_is_still_there() -> None:
    """An entry whose literal has gone would let a reason in unnoticed: the list stays exact."""
    assert shipped_literals() == ALIKE


@pytest.mark.parametrize(
    "line",
    [
        'attempt.stop_reason = "migrate"',
        'if a.end_reason == "preempted": pass',
        'STANDBY_FAILURES = ("failed", "standby_stuck")',
        'close(session, attempt=a, end_reason="cancelled")',
        'ok = stop_reason in {"handover", "no_first_report"}',
    ],
)
def test_the_scan_sees_a_reason_typed_as_a_string(line: str) -> None:
    assert reason_literals(line)


def test_the_scan_leaves_docstrings_and_other_enums_alone() -> None:
    source = (
        'def f():\n    """preempted"""\n'
        "class ObservedState(StrEnum):\n    FAILED = 'failed'\n"
        "x = EndReason.PREEMPTED\n"
    )
    assert not reason_literals(source)


def test_the_stored_values_never_change() -> None:
    """What the database already holds: renaming one is a data migration, not an edit here."""
    assert {r.value for r in StopReason} == {
        "cancel", "migrate", "handover", "standby_stop", "standby_stuck", "withdrawn",
        "no_first_report", "budget_reject", "budget_defer",
    }  # fmt: skip
    assert {r.value for r in EndReason} == {
        "succeeded", "failed", "lost", "preempted", "no_capacity", "cancelled", "config_error",
        "migrated", "handed_over", "standby_stopped", "standby_stuck", "withdrawn",
        "no_first_report", "budget_stopped", "budget_paused",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("reasons", "column"), [(StopReason, "stop_reason"), (EndReason, "end_reason")]
)
def test_every_reason_fits_its_column(reasons: type[Enum], column: str) -> None:
    stored = JobAttempt.__table__.c[column].type
    assert isinstance(stored, String) and stored.length is not None
    assert max(len(r.value) for r in reasons) <= stored.length

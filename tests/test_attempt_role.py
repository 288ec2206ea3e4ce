"""An attempt's role is `JobAttempt.role`, never its stored flag; a standby's state is
`api.jobs.standby`'s, never worked out where it is used.

Before the role, the flag `job_attempts.standby` was read in 38 files, and each query that meant
"the job's attempt" had to remember `.standby.is_(False)` (the jobs', budgets' and placement
repositories did, each by hand). This test reads the shipped packages' syntax trees and fails
on the flag used outside its home, api/models.py: a query filters on `JobAttempt.role`, a
branch asks the role or the standby's state. What else is called `standby` (the operator's
setting, the snapshot's switch, the trainer's run config, a job's held standby in decide()'s
view, a job's ledger) is listed by the name it is read through, so a new reader of the flag
cannot hide among them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "worker")
HOME = "api/models.py"
# `<name>.standby` where <name> is not an attempt: Settings/Snapshot/Situation switches, the
# RunConfig, decide()'s JobState (its held standby), a job's Ledger, the quote's simulation,
# the verdict's Ruling (whether to hold one) and the quote's view of the Snapshot.
OTHER_STANDBYS = frozenset(
    {"settings", "snap", "snapshot", "sit", "config", "job", "ledger", "self", "judged", "up"}
)


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _orm_attempt(func: ast.expr) -> bool:
    """A new row: `JobAttempt(...)` or `JobAttempt.placed(...)`, not the API's `r.JobAttempt`."""
    if isinstance(func, ast.Name):
        return func.id == "JobAttempt"
    return isinstance(func, ast.Attribute) and func.attr == "placed"


def flag_uses(source: str) -> list[int]:
    """The lines of `source` that read or write an attempt's stored standby flag."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "standby":
            if _name(node.value) not in OTHER_STANDBYS:
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and _orm_attempt(node.func):
            found.extend(k.value.lineno for k in node.keywords if k.arg == "standby")
    return sorted(found)


def shipped_uses() -> dict[str, list[int]]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name != HOME and (lines := flag_uses(path.read_text())):
                found[name] = lines
    return found


def test_the_flag_is_read_only_in_its_home() -> None:
    assert not shipped_uses(), (
        "an attempt's standby flag used outside api/models.py: filter on JobAttempt.role, ask "
        "attempt.role or api.jobs.standby.state (file: lines)"
    )


@pytest.mark.parametrize(
    "line",
    [
        "q = select(JobAttempt).where(JobAttempt.standby.is_(False))",
        "x = case((JobAttempt.standby == False, JobAttempt.number))",
        "if attempt.standby: pass",
        "if not standby.standby or standby.ended_at is not None: pass",
        "running = [(j, a) for j, a in rows if not a.standby]",
        "standby.standby = False",
        "JobAttempt.placed(placement, number=2, standby=True)",
        "JobAttempt(id='x', standby=True)",
    ],
)
def test_the_scan_sees_the_flag(line: str) -> None:
    assert flag_uses(line)


@pytest.mark.parametrize(
    "line",
    [
        "ok = cp.settings.standby and holds_standby(cp.launcher)",
        "if job.standby is not None: pass",
        "held = rnd.snapshot.standby",
        "RunConfig(job_id=j, standby=attempt.role is AttemptRole.STANDBY)",
        "q = select(JobAttempt).where(JobAttempt.role == AttemptRole.PRIMARY)",
        "view = r.JobAttempt(id=row.id, standby=row.role is AttemptRole.STANDBY)",
    ],
)
def test_the_scan_leaves_other_standbys_alone(line: str) -> None:
    assert not flag_uses(line)

"""A job's progress is read from its row in one place (api.progress) into a typed value: the
trainer's report and the server's rate. Rows written before it (the JSON column is unchanged)
parse into the same figures and are written back key for key; and no other shipped module
reads the column by its keys, so a key renamed or added is one module's change. Before it,
six modules read `progress.get("samples_per_s")`, `progress["gpu_model"]`,
`before.get("rate_seconds")` and the like, each with its own idea of a missing or odd value."""

from __future__ import annotations

import ast
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.progress import REPORT_FIELDS, AttemptRate, NotAReport, read, read_or_none
from gpujobs.resources import ProgressReport

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "api" / "progress.py"
SERVER_KEYS = frozenset({"rate_at", "rate_measured_at", "rate_seconds", "updated_at"})

# A row as the progress endpoint wrote it before api.progress, the attempt's rate included
# (its `samples_per_s` is the attempt's rate, 4 windows after a warm-up report of 133.3).
OLD_ROW = {
    "step": 40,
    "total_steps": 100,
    "loss": 2.5,
    "samples_per_s": 396.2,
    "measured_at": "2026-12-06T14:00:05.250000Z",
    "data_wait_fraction": 0.1,
    "checkpoint_stall_s": 3.0,
    "checkpoint_step": 40,
    "updated_at": "2026-12-06T14:00:06.500000+00:00",
    "gpu_model": "A10G",
    "rate_at": "2026-12-06T14:00:06.500000+00:00",
    "rate_measured_at": "2026-12-06T14:00:05.250000+00:00",
    "rate_seconds": 19.2,
    "attempt_id": "att-7",
}


def test_an_old_row_parses_into_its_figures_and_is_written_back_key_for_key() -> None:
    progress = read(OLD_ROW)
    assert progress is not None
    report = progress.report
    assert (report.step, report.total_steps, report.checkpoint_step) == (40, 100, 40)
    assert (report.loss, report.data_wait_fraction, report.checkpoint_stall_s) == (2.5, 0.1, 3.0)
    assert report.measured_at == datetime(2026, 12, 6, 14, 0, 5, 250000, tzinfo=UTC)
    assert report.attempt_id == "att-7"
    assert progress.gpu_model == "A10G"
    assert progress.updated_at == datetime(2026, 12, 6, 14, 0, 6, 500000, tzinfo=UTC)
    assert progress.rate == AttemptRate(
        samples_per_s=396.2,
        seconds=19.2,
        at=datetime(2026, 12, 6, 14, 0, 6, 500000, tzinfo=UTC),
        measured_at=datetime(2026, 12, 6, 14, 0, 5, 250000, tzinfo=UTC),
    )
    assert progress.samples_per_s == 396.2 and progress.step == 40
    assert not progress.unreadable
    stored = progress.stored()
    assert stored == OLD_ROW and list(stored) == list(OLD_ROW)


def test_a_row_without_the_servers_keys_parses_with_none_of_them() -> None:
    """A row seeded before the rate was kept (or a report with no attempt open yet)."""
    progress = read({"step": 1200, "total_steps": 3000, "samples_per_s": 12.5})
    assert progress is not None
    assert (progress.step, progress.total_steps, progress.samples_per_s) == (1200, 3000, 12.5)
    assert progress.rate is None and progress.gpu_model is None and progress.updated_at is None
    assert progress.report.attempt_id is None


def test_no_row_is_no_progress_and_a_column_of_something_else_is_refused() -> None:
    assert read(None) is None
    with pytest.raises(NotAReport):
        read(["not", "a", "report"])


def test_the_readers_that_bill_or_watch_take_a_column_of_something_else_as_no_report() -> None:
    """Billing, the first-report watch and the progress endpoint read the row with
    read_or_none: a column holding a list or a number must not stop an attempt from closing
    (before api.progress they took `job.progress or {}`)."""
    for stored in ([], "", 0, ["not", "a", "report"], 7):
        assert read_or_none(stored) is None
    progress = read_or_none({"step": 5})
    assert progress is not None and progress.step == 5


def test_a_whole_number_spelled_as_a_float_is_read_as_the_integer_it_is() -> None:
    progress = read({"step": 5.0, "total_steps": 100.0, "checkpoint_step": 4.0})
    assert progress is not None
    assert (progress.step, progress.total_steps, progress.report.checkpoint_step) == (5, 100, 4)
    assert isinstance(progress.step, int) and progress.unreadable == {}


def test_a_figure_of_the_wrong_type_is_kept_as_stored_for_the_bounds_to_name() -> None:
    """The scheduler names such a field and sets the job aside (api.placement.world); the typed
    report holds no figure for it. Out-of-bounds numbers are read as they are."""
    progress = read({"total_steps": 1.5, "samples_per_s": "fast", "loss": math.inf, "gpu_model": 7})
    assert progress is not None
    assert progress.unreadable == {"total_steps": 1.5, "samples_per_s": "fast", "step": None}
    assert progress.total_steps is None and progress.samples_per_s is None
    assert progress.step is None  # the row holds none: billing records no end step
    assert progress.report.loss == math.inf and progress.gpu_model is None


def test_every_field_of_the_report_is_read_back() -> None:
    assert sorted(REPORT_FIELDS) == sorted(ProgressReport.model_fields)


def _named_progress(node: ast.expr) -> bool:
    """`progress`, `job.progress`, `(job.progress or {})` and the like."""
    if isinstance(node, ast.BoolOp):
        return any(_named_progress(v) for v in node.values)
    if isinstance(node, ast.Name):
        return node.id.endswith("progress")
    if isinstance(node, ast.Attribute):
        return node.attr.endswith("progress")
    return False


def _untyped(annotation: ast.expr | None) -> bool:
    """`Mapping[str, Any]`, `dict[str, Any]` and their `| None`."""
    return annotation is not None and "[str, Any]" in ast.unparse(annotation)


def _key_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Subscript) and _named_progress(node.value):
            found.append(f"{where} subscripts the progress")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and _named_progress(node.func.value)
        ):
            found.append(f"{where} reads the progress by key")
        elif isinstance(node, ast.Constant) and node.value in SERVER_KEYS - {"updated_at"}:
            found.append(f"{where} names the server's key {node.value!r}")
        elif isinstance(node, ast.arg) and "progress" in node.arg and _untyped(node.annotation):
            found.append(f"{where} takes the progress untyped: {ast.unparse(node)}")
    return found


def test_only_api_progress_reads_the_rows_keys() -> None:
    files = [p for pkg in ("api", "worker") for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert HOME in files
    found = [line for path in files if path != HOME for line in _key_reads(path)]
    assert found == []

"""A job's progress as its row keeps it (`jobs.progress`, a JSON column): the trainer's last
report (gpujobs.resources.ProgressReport, the model the progress endpoint takes) and what the
server adds to it: when it was recorded, the GPU model of the attempt that reported, and that
attempt's rate (api.jobs.measured_rate). The row is read here, once, into `Progress`; nothing
else reads its keys, and `Progress.stored()` writes them.

The column's keys are as the progress endpoint has always written them, so every row parses:
- the report's fields, `attempt_id` (whose report: the open attempt's, the server's word) last;
- `updated_at` and `gpu_model`;
- with the attempt's rate: `rate_at` (when the server last took a window), `rate_measured_at`
  (the trainer's time of that window), `rate_seconds` (the windows behind the rate) and
  `samples_per_s`, which then holds the attempt's rate in place of the trainer's window.
A row's figures are read as stored, never held to the report's bounds: one written before they
held (or straight to the database) is set aside by the scheduler with the field named
(api.placement.world.stored_problem), which `unreadable` lets it do for a figure of the wrong
type too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpujobs.resources import ProgressReport

_INTEGERS = ("step", "total_steps", "checkpoint_step")
_NUMBERS = ("loss", "samples_per_s", "data_wait_fraction", "checkpoint_stall_s")
_TIMES = ("measured_at",)
_TEXTS = ("attempt_id",)
# Every field of the report is read by its type: tests/api/test_progress_row.py holds the two
# together, so a field added to the report is read back as soon as it is written.
REPORT_FIELDS = (*_INTEGERS, *_NUMBERS, *_TIMES, *_TEXTS)


class NotAReport(ValueError):
    """The column holds something other than a report (a list, a number): no figure to read."""


@dataclass(frozen=True, slots=True)
class AttemptRate:
    """The reporting attempt's rate as the server keeps it (api.jobs.measured_rate): its
    windows' mean over time, the rate the scheduler counts the work left from."""

    samples_per_s: float
    seconds: float  # the windows behind it, each second discounted by its age (0: warm-up only)
    at: datetime | None = None  # the server's clock when it last took a window
    measured_at: datetime | None = None  # the trainer's clock closing that window


@dataclass(frozen=True, slots=True)
class Progress:
    report: ProgressReport  # the trainer's figures; `attempt_id`: the open attempt's, if any
    updated_at: datetime | None = None
    # The GPU model of the attempt that reported: the rate's (api.pricing.gpu_speed converts it).
    gpu_model: str | None = None
    rate: AttemptRate | None = None  # None: the attempt has measured no rate yet
    # Figures the row holds that are not of the report's type (or a missing step), as stored;
    # their fields in the report hold the default.
    unreadable: Mapping[str, object] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float | None:
        """The rate the work left is counted from: the attempt's once it has one, else the
        window the trainer reported, as it came."""
        return self.rate.samples_per_s if self.rate is not None else self.report.samples_per_s

    @property
    def total_steps(self) -> int | None:
        return self.report.total_steps

    @property
    def step(self) -> int | None:
        """The trainer's last step; None where the row holds none."""
        return None if "step" in self.unreadable else self.report.step

    def stored(self) -> dict[str, Any]:
        """The row's JSON, keys as the progress endpoint has always written them."""
        row = self.report.model_dump(mode="json", exclude={"attempt_id"})
        row["updated_at"] = _iso(self.updated_at)
        row["gpu_model"] = self.gpu_model
        if self.rate is not None:
            row["rate_at"] = _iso(self.rate.at)
            row["rate_measured_at"] = _iso(self.rate.measured_at)
            row["samples_per_s"] = self.rate.samples_per_s
            row["rate_seconds"] = self.rate.seconds
        if self.report.attempt_id is not None:
            row["attempt_id"] = self.report.attempt_id
        return row


def read_or_none(stored: object) -> Progress | None:
    """`read`, with a column holding something other than a report taken as no report: for the
    readers that only bill or watch (the scheduler's `read` names the field and sets the job
    aside); what the trainer reports next replaces the column."""
    try:
        return read(stored)
    except NotAReport:
        return None


def read(stored: object) -> Progress | None:
    """The progress a job's row holds; None: no report yet. Raises NotAReport for a column
    holding something else."""
    if stored is None:
        return None
    if not isinstance(stored, dict):
        raise NotAReport(f"is not a progress report: {type(stored).__name__}")
    figures: dict[str, Any] = {}
    unreadable: dict[str, object] = {}
    for name in REPORT_FIELDS:
        if name not in stored or stored[name] is None:
            continue
        value = _figure(name, stored[name])
        if value is None:
            unreadable[name] = stored[name]
        else:
            figures[name] = value
    if "step" not in figures:
        unreadable.setdefault("step", None)
        figures["step"] = 0
    # Not validated: a stored row's figures are read as stored (the module's docstring).
    report = ProgressReport.model_construct(**figures)
    gpu_model = stored.get("gpu_model")
    return Progress(
        report=report,
        updated_at=_time(stored.get("updated_at")),
        gpu_model=gpu_model if isinstance(gpu_model, str) else None,
        rate=_rate(stored, report.samples_per_s),
        unreadable=unreadable,
    )


def _rate(stored: dict[str, Any], samples_per_s: float | None) -> AttemptRate | None:
    """The attempt's rate: the server writes its four keys together, `samples_per_s` its."""
    seconds = _number(stored.get("rate_seconds"))
    if seconds is None or samples_per_s is None:
        return None
    return AttemptRate(
        samples_per_s=samples_per_s,
        seconds=seconds,
        at=_time(stored.get("rate_at")),
        measured_at=_time(stored.get("rate_measured_at")),
    )


def _figure(name: str, value: object) -> object | None:
    """The stored value as the field's type; None where it is not one."""
    if name in _INTEGERS:
        if isinstance(value, float) and value.is_integer():
            return int(value)  # a whole number a JSON writer spelled 5.0
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if name in _NUMBERS:
        return _number(value)
    if name in _TIMES:
        return _time(value)
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    """A float (NaN and infinity included: the bounds judge them), None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past any float, from decoded JSON
        return None


def _time(value: object) -> datetime | None:
    """An ISO time (naive ones read as UTC); None where there is none."""
    if not isinstance(value, str):
        return None
    try:
        then = datetime.fromisoformat(value)
    except ValueError:
        return None
    return then if then.tzinfo is not None else then.replace(tzinfo=UTC)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()

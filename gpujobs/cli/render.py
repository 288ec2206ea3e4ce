"""Output for people (aligned tables, a live progress bar) and for scripts (JSON)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from pydantic import BaseModel

from gpujobs.cli.layout import wrapped
from gpujobs.plans import Plan
from gpujobs.reasons import EndReason
from gpujobs.resources import Job, JobEvent, JobStatus, Placement, Quote
from gpujobs.spec import CapacityType


def money(usd: float | None) -> str:
    """Cents, and for amounts under a cent the first significant digits: never a false $0.00."""
    if usd is None:
        return "-"
    amount = abs(usd)
    if amount >= 0.01 or amount == 0:
        text = f"{amount:,.2f}"
    elif amount >= 0.0001:
        text = f"{amount:.4f}".rstrip("0")
    else:
        return "<$0.0001" if usd > 0 else "-<$0.0001"
    return f"-${text}" if usd < 0 else f"${text}"


ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def reason_text(job: Job) -> str:
    """` (why)` after a status, unless the reason only repeats the status ("RUNNING (running)")."""
    reason = job.status_reason
    return "" if not reason or reason.lower() == job.status.value.lower() else f" ({reason})"


def words(value: str | None) -> str | None:
    """A stored value as a table writes it: `handed_over` is `handed over`."""
    return None if value is None else value.replace("_", " ")


def when(value: datetime | None, *, seconds: bool = False) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M" + (":%S" if seconds else ""))


def event_figures(data: dict[str, Any]) -> str:
    """An event's figures on one line: `key=value`, floats rounded and times to the second for
    reading; the attempt's id is left out where its number is there (`show` lists attempts)."""
    parts = []
    for key, value in data.items():
        if key == "attempt_id" and "attempt" in data:
            continue
        if isinstance(value, str) and ISO_TIME.match(value):
            value = when(datetime.fromisoformat(value), seconds=True).replace(" ", "T")
        elif isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, dict | list):
            value = json.dumps(value, separators=(",", ":"))
        parts.append(f"{key}={value}")
    return " ".join(parts)


def plan_line(plan: Plan) -> str:
    """Where a job would start: cloud, region/zone, instance, capacity, price. Its odds of the
    deadline are the quote's, on the line below: that plan's own (it alone to the end, never
    moving) would be a second P(meet deadline) on one screen."""
    o = plan.offer
    capacity = capacity_name(plan.capacity_type)
    return (
        f"{o.cloud} {o.region}/{o.zone} {plan.nodes}x {o.instance_type} ({o.gpu_count}x "
        f"{o.gpu_model}) on {capacity} at {money(plan.price_per_hour)}/h"
    )


# Under the estimate table: its rows and the quote answer different questions.
PLANS_NOTE = (
    "each row: that plan alone to the end (spot: preemptions and waits for capacity, never "
    "moving); the quote: the policy as it will run, moves to on-demand included"
)


def quote_line(quote: Quote) -> str:
    """The policy as it will run, in one line: what it likely and on average costs, what is
    held, and when it ends."""
    likely = f"{money(quote.typical_cost)} likely, " if quote.typical_cost is not None else ""
    return (
        f"quote (the policy as it will run): {likely}{money(quote.expected_cost)} expected, "
        f"{money(quote.hold_cost)} held of the budget, finish {when(quote.expected_finish)} UTC, "
        f"P(meet deadline) {quote.p_meet_deadline:.0%}"
    )


def event_line(event: JobEvent, *, simulated: bool = False) -> str:
    """One line a person reads while waiting: where the job went, and why; `simulated`: the
    placement is the local launcher's (`Deployment.simulated`), not cloud capacity."""
    d = event.data
    attempt = f"attempt {d['attempt']}" if "attempt" in d else "job"
    to = event.to_status
    if event.from_status == to and event.reason:
        return event.reason  # a note (a standby held, a handover): it says it all
    reason = f": {event.reason}" if event.reason else ""
    if to == JobStatus.SCHEDULED and "offer" in d:
        # No P(meet deadline): the quote above the bar is the job's; this placement's own
        # (it alone to the end) would be a second figure for the same question.
        figures = [f"{money(d.get('price_per_hour'))}/h"]
        if "expected_cost" in d:
            figures.append(f"expected {money(d['expected_cost'])} to finish there")
        capacity = str(d.get("capacity_type", "")).replace("_", "-")
        placed = "placed (simulated)" if simulated else "placed"
        return f"{attempt} {placed} on {capacity} {d['offer']} ({', '.join(figures)}){reason}"
    if to == JobStatus.RUNNING:
        return f"{attempt} running"
    if to == JobStatus.PREEMPTED:
        step = f" at step {d['step']}" if d.get("step") is not None else ""
        # The scheduler's own move goes through PREEMPTED too; it is not the cloud's doing.
        stopped = "stopped to move" if d.get("end_reason") == EndReason.MIGRATED else "preempted"
        return f"{attempt} {stopped}{step}{reason}"
    if to == JobStatus.PENDING and event.from_status is not None:
        resume = d.get("resume_from_step")
        again = f"; will resume from step {resume}" if resume else ""
        return f"back to pending{again}{reason}"
    return f"{to.value.lower()}{reason}"


def log_line(line: str) -> str:
    """A trainer's JSON line as a person reads it: its time, the event (or the step), then its
    figures rounded, unset ones left out; any other line as it is."""
    record = _log_record(line)
    return line if record is None else log_record_text(record)


def _log_record(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


# A step line's figures, named to fit a line: the data wait as a share, the rate per second.
LOG_NAMES = {"samples_per_s": "samples/s", "data_wait_fraction": "data_wait"}


def log_record_text(record: dict[str, Any]) -> str:
    record = dict(record)
    stamp = _epoch_text(record.pop("time", None))
    record.pop("attempt_id", None)  # the `=== attempt N ===` line above names the attempt
    event = record.pop("event", None)
    if event is None and "step" in record:
        step, total = record.pop("step"), record.pop("total_steps", None)
        event = f"step {step}" + (f"/{total}" if total is not None else "")
        if not record.get("checkpoint_stall_s"):
            record.pop("checkpoint_stall_s", None)  # 0: no checkpoint stalled this window
    message = record.pop("message", None)
    head = f"{event}: {message}" if message is not None else str(event or "")
    figures: dict[str, Any] = {}
    for key, value in record.items():
        if value is None:
            continue  # unset (`checkpoint_every_seconds` where steps set it): nothing to read
        if key.endswith("_fraction") and isinstance(value, int | float):
            value = f"{value:.0%}"
        figures[LOG_NAMES.get(key, key)] = value
    return "  ".join(part for part in (stamp, head, event_figures(figures)) if part)


def _epoch_text(at: Any) -> str:
    if not isinstance(at, int | float) or isinstance(at, bool):
        return "-"
    try:
        return when(datetime.fromtimestamp(at, UTC), seconds=True)
    except (OverflowError, OSError, ValueError):
        return "-"


class LogLines:
    """Log text as it arrives, a line at a time: for people, each trainer line through
    `log_record_text`, wrapped to `width`, a step line naming the checkpoint only when it is
    new; with `as_json`, one JSON object per line, tagged with its attempt (from the
    `=== attempt N: ... ===` lines the API puts before each attempt's output)."""

    HEADER = re.compile(r"^=== attempt (\d+): (.*) ===$")

    def __init__(self, out: TextIO, *, as_json: bool, width: int | None = None) -> None:
        self.out = out
        self.as_json = as_json
        self.width = width
        self.partial = ""
        self.attempt: int | None = None
        self.checkpoint: object = None  # the checkpoint step the last step line named

    def feed(self, chunk: str) -> None:
        *lines, self.partial = (self.partial + chunk).split("\n")
        for line in lines:
            self._line(line)
        self.out.flush()

    def close(self) -> None:
        if self.partial:
            self._line(self.partial)
            self.partial = ""
        self.out.flush()

    def _line(self, line: str) -> None:
        header = self.HEADER.match(line)
        if header:
            self.attempt, self.checkpoint = int(header.group(1)), None
        if self.as_json:
            if not header:
                self.out.write(json.dumps({"attempt": self.attempt, "line": line}) + "\n")
            return
        record = None if header else _log_record(line)
        if record is not None and "event" not in record and "checkpoint_step" in record:
            if record["checkpoint_step"] == self.checkpoint:
                # Said on an earlier line, with the stall that checkpoint cost.
                del record["checkpoint_step"]
                record.pop("checkpoint_stall_s", None)
            else:
                self.checkpoint = record["checkpoint_step"]
        text = line if record is None else log_record_text(record)
        for part in wrapped(text, self.width, indent=LOG_INDENT):
            self.out.write(part + "\n")


LOG_INDENT = 21  # under the event or step, past the time


def short_ids(ids: Sequence[str]) -> dict[str, str]:
    """Each id as its first 13 characters (a UUIDv7's millisecond: what the API takes as a unique
    start), or whole where two listed ids share them."""
    starts = [job_id[:SHORT_ID] for job_id in ids]
    return {
        job_id: start if starts.count(start) == 1 else job_id
        for job_id, start in zip(ids, starts, strict=True)
    }


SHORT_ID = 13


def to_json(value: BaseModel | Sequence[BaseModel] | dict[str, Any] | list[Any]) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        return {k: to_json(v) if isinstance(v, BaseModel | list) else v for k, v in value.items()}
    return [to_json(v) if isinstance(v, BaseModel) else v for v in value]


def print_json(value: Any, out: TextIO = sys.stdout) -> None:
    out.write(json.dumps(to_json(value), indent=2) + "\n")


def progress_text(job: Job) -> str:
    p = job.progress
    if p is None:
        return "-"
    if p.total_steps:
        return f"{p.step}/{p.total_steps} ({100 * p.step / p.total_steps:.0f}%)"
    return f"step {p.step}"


def resources_text(job: Job) -> str:
    """GPUs x model (x nodes): what the job runs on once placed, what it asked for before."""
    p = job.placement
    if p is not None:
        gpus, model, nodes = p.gpu_count, p.gpu_model, p.nodes
    else:
        wanted = job.spec.resources
        gpus, nodes = wanted.gpus_per_node, wanted.nodes
        model = "|".join(wanted.gpu_models) if wanted.gpu_models else "any GPU"
    return gpus_text(gpus, model, nodes)


def gpus_text(gpus: int, model: str, nodes: int = 1) -> str:
    """GPUs per node x model (x nodes), as every table shows them: `1x T4`, `8x H100 x2 nodes`."""
    return f"{gpus}x {model}" + (f" x{nodes} nodes" if nodes > 1 else "")


def capacity_name(capacity: CapacityType) -> str:
    """`on-demand`, `spot`, `reserved`: as every table writes a capacity type."""
    return capacity.value.replace("_", "-")


def capacity_text(placement: Placement | None) -> str:
    """The latest attempt's capacity and zone, e.g. `spot aws/use1-az1`."""
    if placement is None:
        return "-"
    return f"{capacity_name(placement.capacity_type)} {placement.cloud}/{placement.zone}"


def placement_text(placement: Placement | None, *, simulated: bool = False) -> str:
    """Where the latest attempt runs or ran, in full; `simulated`: tagged as the local
    launcher's placement (`Deployment.simulated`)."""
    if placement is None:
        return "not placed yet"
    state = "running" if placement.ended_at is None else "ended"
    return (
        f"attempt {placement.attempt} ({state}): {placement.cloud} "
        f"{placement.region}/{placement.zone}, {placement.nodes}x {placement.instance_type}, "
        f"{capacity_name(placement.capacity_type)} at "
        f"{money(placement.price_per_hour)}/h" + (" (simulated)" if simulated else "")
    )


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h07m`: how long something has lasted, to read at a glance."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ProgressBar:
    """One line redrawn with \\r on a terminal; on anything else, a line per change. `columns`:
    the width to fit (None: no limit); on a terminal the line stays one shorter, since a line
    that fills it makes some terminals wrap, and each redraw would start a new row."""

    def __init__(self, out: TextIO, *, width: int = 30, columns: int | None = None) -> None:
        self.out = out
        self.width = width
        self.tty = out.isatty()
        self.limit = None if columns is None else max(20, columns - (1 if self.tty else 0))
        self.last = ""
        self.last_state: tuple[object, ...] = ()

    def update(self, job: Job, *, since: datetime | None = None) -> None:
        """Draw the job's state; `since`: when it entered its status (for how long it waits)."""
        line = self._line(job, since)
        p = job.progress
        # Off a terminal (a log, a pipe, CI) a line per tenth of the steps, not per report.
        tenth = None if p is None else (10 * p.step // p.total_steps if p.total_steps else p.step)
        state = (job.status, tenth, job.attempts)  # a new reason gets a note of its own
        if self.tty:
            self.out.write("\r" + line.ljust(len(self.last)))
            self.out.flush()
        elif state != self.last_state:
            self.out.write(line + "\n")
        self.last, self.last_state = line, state

    def _line(self, job: Job, since: datetime | None) -> str:
        status = f"{job.status.value:<10}"
        tail = f"  attempts {job.attempts}  {money(job.cost)}"
        p = job.progress
        if job.status not in (JobStatus.RUNNING, JobStatus.SUCCEEDED) and job.status_reason:
            # Waiting (or stopped): why, and for how long, matter more than the steps done.
            # How long it waits; a job that has ended waits for nothing ("CANCELLED 0s").
            lasted = (
                None
                if since is None or job.status.terminal
                else duration((datetime.now(UTC) - since).total_seconds())
            )
            at_step = None if p is None else f"step {p.step}"
            parts = (lasted, at_step, tail.strip(), job.status_reason)
            return self._fit(f"{status} " + "  ".join(part for part in parts if part))
        if p is not None and p.total_steps:
            done = min(1.0, p.step / p.total_steps)
            steps = f"{p.step}/{p.total_steps} steps {done:4.0%}"
            room = self.width if self.limit is None else self.limit - len(status + steps + tail) - 4
            bar_width = min(self.width, room)
            if bar_width >= 10:
                filled = int(done * bar_width)
                steps = "[" + "#" * filled + "." * (bar_width - filled) + "] " + steps
            return self._fit(f"{status} {steps}{tail}")
        if p is not None:
            steps = f"step {p.step}"
        elif job.status == JobStatus.RUNNING:
            steps = "starting: the trainer has not reported a step yet"
        elif job.status == JobStatus.PENDING:
            steps = "waiting for the scheduler to place it"
        else:
            steps = "waiting for the first progress report"
        return self._fit(f"{status} {steps}{tail}")

    def _fit(self, line: str) -> str:
        if self.limit is None or len(line) <= self.limit:
            return line
        return line[: self.limit - 1] + "\u2026"

    def note(self, line: str) -> None:
        """A line above the bar (wrapped to fit), which is then drawn again below it."""
        lines = wrapped(line, self.limit, indent=4)
        if self.tty:
            self.out.write("\r" + lines[0].ljust(len(self.last)) + "\n")
            for rest in lines[1:]:
                self.out.write(rest + "\n")
            if self.last:
                self.out.write(self.last)
        else:
            for one in lines:
                self.out.write(one + "\n")
        self.out.flush()

    def finish(self) -> None:
        if self.tty and self.last:
            self.out.write("\n")
            self.out.flush()


class Watch:
    """What `submit --wait` shows as a job goes: a line per event, a line when the reason the job
    waits changes without one (the scheduler defers without an event), and the bar."""

    def __init__(self, bar: ProgressBar, *, simulated: bool = False) -> None:
        self.bar = bar
        self.simulated = simulated
        self.seen: set[int] = set()
        self.said: tuple[JobStatus, str | None] | None = None

    def update(self, job: Job, events: Sequence[JobEvent]) -> None:
        since = None
        for event in events:
            if event.to_status == job.status and event.from_status != event.to_status:
                since = event.at
            if event.id not in self.seen:
                self.seen.add(event.id)
                self.said = (event.to_status, event.reason)
                line = event_line(event, simulated=self.simulated)
                self.bar.note(f"{when(event.at, seconds=True)}  {line}")
        stale = bool(events) and events[-1].to_status != job.status  # events came in since
        # A reason that only repeats the status ("running") says nothing the bar does not.
        repeats = (job.status_reason or "").lower() == job.status.value.lower()
        if (
            job.status_reason
            and not repeats
            and not stale
            and self.said != (job.status, job.status_reason)
        ):
            self.said = (job.status, job.status_reason)
            deadline = f" (deadline {when(job.deadline_at)} UTC)" if job.deadline_at else ""
            self.bar.note(
                f"{when(datetime.now(UTC), seconds=True)}  {job.status.value.lower()}: "
                f"{job.status_reason}{deadline}"
            )
        self.bar.update(job, since=since)

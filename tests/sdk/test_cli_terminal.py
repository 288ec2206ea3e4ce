"""The CLI in a terminal as a newcomer has one: 80 columns, output piped into `head`, and a job
that waits for spot capacity under `submit --wait`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from api.database import transaction
from api.jobs import lifecycle
from api.models import Job as JobRow
from api.models import utcnow
from gpujobs.cli import render
from gpujobs.client import Client, load_spec
from gpujobs.resources import Job, JobEvent, JobStatus, Progress
from tests.sdk.server import LiveApi
from tests.sdk.test_cli import EXAMPLES, GPT_SMALL, gpujobs

FIRST_RUN = str(EXAMPLES / "first-run.yaml")
WAITING = "waiting for spot capacity: the deadline's slack allows it"


def _set_reason(api: LiveApi, job_id: str, reason: str) -> None:
    """What the scheduler does when it defers a job: a new reason, no event."""
    with transaction(api.session_factory) as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        row.status_reason = reason


def _preempted_job(api: LiveApi) -> str:
    """A job as the trace market leaves it: placed on spot, preempted, back to waiting, with a
    long name, two attempts and every figure the scheduler records."""
    spec = load_spec(FIRST_RUN).model_copy(update={"name": "first-run-on-the-shipped-trace"})
    with Client() as gj:
        job_id = gj.submit(spec).id
    now = utcnow()
    api.add_attempt(
        job_id, 1, cloud="gcp", region="us-central1", zone="us-central1-a",
        instance_type="a2-highgpu-1g", gpu_model="A100", capacity_type="spot", nodes=2,
        started_at=now - timedelta(hours=2), ended_at=now - timedelta(hours=1),
        end_reason="preempted", cost_microusd=1_234_567, samples_per_s=12345.6,
    )  # fmt: skip
    api.add_attempt(
        job_id, 2, instance_type="p4d.24xlarge", gpu_model="A100", gpu_count=8,
        price_per_hour=32.7726, started_at=now - timedelta(hours=1),
        ended_at=now - timedelta(minutes=5), end_reason="preempted", cost_microusd=30_000_000,
    )  # fmt: skip
    placed = {
        "attempt_id": "01a23905-c9af-7000-8000-000000000001", "attempt": 2,
        "offer": "aws:use1-az1:p4d.24xlarge:A100x8", "capacity_type": "spot",
        "price_per_hour": 32.7726, "expected_cost": 12.3456,
        "expected_finish": (now + timedelta(hours=1)).isoformat(), "p_meet_deadline": 0.9734,
    }  # fmt: skip
    with transaction(api.session_factory) as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        steps = (
            (JobStatus.SCHEDULED, "spot: cheapest expected cost while slack remains", placed),
            (JobStatus.RUNNING, "running", {"attempt": 2}),
            (JobStatus.PREEMPTED, "spot capacity was reclaimed", {"attempt": 2, "step": 3500}),
            (JobStatus.PENDING, "spot capacity was reclaimed", {"resume_from_step": 3500}),
        )
        for status, reason, data in steps:
            lifecycle.switch_status(session, row, status, reason=reason, data=data)
        row.status_reason = WAITING
    return job_id


COMMANDS = (
    ("ls",),
    ("show", "{job}"),
    ("events", "{job}"),
    ("estimate", GPT_SMALL),
    ("estimate", str(EXAMPLES / "resnet-spot.yaml")),
    ("offers", "--limit", "5"),
    ("usage", "--group-by", "job"),
    ("budget",),
)


def test_every_command_fits_80_columns_and_wide_shows_every_column(
    env: dict[str, str], api: LiveApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _preempted_job(api)
    monkeypatch.setenv("COLUMNS", "80")
    narrow = {}
    for command in COMMANDS:
        argv = [arg.format(job=job_id) for arg in command]
        code, out = gpujobs(*argv)
        assert code == 0, argv
        assert max(len(line) for line in out.splitlines()) <= 80, (argv, out)
        narrow[command[0]] = out
    # What is left at 80 columns still answers what each command is for.
    header = narrow["ls"].splitlines()[0].split()
    assert header[:5] == ["ID", "NAME", "STATUS", "PROGRESS", "COST"]
    assert "first-run-on-the-shipped-trace" in narrow["ls"]
    assert WAITING in " ".join(narrow["show"].split())  # the reason, wrapped, never cut
    events = narrow["events"]
    assert "offer=aws:use1-az1:p4d.24xlarge:A100x8" in events  # the figures, under their row
    assert "spot capacity was reclaimed" in " ".join(events.split())

    code, out = gpujobs("ls", "--wide")
    assert code == 0 and max(len(line) for line in out.splitlines()) > 80
    assert out.splitlines()[0].split() == [
        "ID", "NAME", "TEAM", "STATUS", "PROGRESS", "RESOURCES", "CAPACITY", "COST",
        "ATTEMPTS", "PREEMPTED", "CREATED",
    ]  # fmt: skip
    code, out = gpujobs("show", job_id, "--wide")
    assert out.splitlines()[-4].split() == [  # above its 2 attempts and the simulated notice
        "#", "CAPACITY", "INSTANCE", "ZONE", "GPUS", "SAMPLES/S", "$/H", "STARTED", "ENDED",
        "END", "COST",
    ]  # fmt: skip
    code, out = gpujobs("events", job_id, "--wide")
    assert out.splitlines()[0].split() == ["AT", "CHANGE", "REASON", "FIGURES"]
    code, out = gpujobs("estimate", GPT_SMALL, "--wide")
    assert out.splitlines()[0].split()[-3:] == ["P(MEET)", "FINISH", "WHY"]


def test_submit_and_its_progress_fit_80_columns(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, _ = gpujobs("submit", FIRST_RUN, "--wait", "--timeout", "0.3", "--poll", "0.05")
    shown = capsys.readouterr().err
    assert code == 7
    assert "\nplan: " in shown and "P(meet deadline)" in " ".join(shown.split())
    assert max(len(line) for line in shown.splitlines()) <= 80, shown


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_an_80_column_terminal_each_redraw_stays_on_its_row() -> None:
    """A line as wide as the terminal wraps, and each \\r redraw then starts a new row."""
    screen = Terminal()
    bar = render.ProgressBar(screen, columns=80)
    watch = render.Watch(bar)
    job = Job.model_validate(
        {
            "id": "01a23905-c9af-7000-8000-000000000001", "team": "default",
            "name": "first-run", "status": JobStatus.RUNNING,
            "spec": {"name": "first-run", "trainer": {"steps": 6000}},
            "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
            "deadline_at": "2025-01-01T01:00:00Z", "attempts": 12,
            "cost_microusd": 123_456_789, "progress": {"step": 5999, "total_steps": 6000},
        }
    )  # fmt: skip
    watch.update(job, [])
    job.status, job.status_reason = JobStatus.PENDING, WAITING + ", and more words " * 3
    watch.update(job, [])
    job.progress = Progress(step=6000, total_steps=6000)
    job.status, job.status_reason = JobStatus.RUNNING, None
    watch.update(job, [])
    bar.finish()
    rows = [part for line in screen.getvalue().split("\n") for part in line.split("\r")]
    assert max(len(row) for row in rows) <= 79
    assert "[" in rows[-2] and "6000/6000 steps 100%" in rows[-2]  # the bar, narrowed to fit


def test_wait_shows_why_the_job_waits_and_each_new_reason(
    env: dict[str, str], api: LiveApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--wait` on a job the scheduler defers: the reason it gives, and the next one when it
    changes (a deferral writes no event), not "waiting for the first progress report"."""
    with Client() as gj:
        job = gj.submit(FIRST_RUN, idempotency_key="waits-for-spot")
    _set_reason(api, job.id, WAITING)
    later = "no allowed capacity is available now"

    class Screen(io.StringIO):
        """stderr, moving the job on once each reason is on it: no timing involved."""

        def write(self, text: str) -> int:
            written = super().write(text)
            seen = self.getvalue()
            if WAITING in seen and later not in seen and not getattr(self, "moved", False):
                self.moved = True
                _set_reason(api, job.id, later)
            elif later in seen and not getattr(self, "done", False):
                self.done = True
                with Client() as gj:
                    gj.cancel(job.id)
            return written

    screen = Screen()
    monkeypatch.setattr(sys, "stderr", screen)
    code, out = gpujobs(
        "submit", FIRST_RUN, "-y", "--idempotency-key", "waits-for-spot", "--wait",
        "--poll", "0.02", "--timeout", "60",
    )  # fmt: skip
    shown = screen.getvalue()
    assert code == 1 and out.split()[:3] == [job.id, "first-run", "CANCELLED"]
    deadline = render.when(job.deadline_at)
    assert f"pending: {WAITING} (deadline {deadline} UTC)" in shown
    assert f"pending: {later}" in shown
    bar = next(line for line in shown.splitlines() if line.startswith("PENDING "))
    assert bar.endswith(WAITING) and "attempts 0" in bar
    assert "waiting for the first progress report" not in shown


def test_a_closed_output_pipe_ends_every_command_quietly(
    env: dict[str, str], api: LiveApi, tmp_path: Path
) -> None:
    """`gpujobs show JOB | head`: once the reader has gone, no traceback, status 0 or 141."""
    with Client() as gj:
        job = gj.submit(GPT_SMALL)
    api.finish_with_log(job.id, "".join(f"loss {i}\n" for i in range(20_000)))
    commands = (
        ["ls"], ["show", job.id], ["events", job.id], ["logs", job.id], ["logs", job.id, "-f"],
        ["estimate", GPT_SMALL], ["offers"], ["usage"], ["budget"], ["ls", "--json"], ["--help"],
    )  # fmt: skip
    for command in commands:
        reader, writer = os.pipe()
        os.close(reader)  # no one will ever read what the command prints
        try:
            run = subprocess.run(
                [sys.executable, "-m", "gpujobs.cli", *command],
                stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120,
            )  # fmt: skip
        finally:
            os.close(writer)
        assert run.returncode in (0, 141) and run.stderr == "", (command, run)
    # And through a shell, as a person types it: head reads its line and goes.
    script = f"{sys.executable} -m gpujobs.cli logs {job.id} | head -n 2; echo ${{PIPESTATUS[0]}}"
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert run.stdout.splitlines()[1:] == ["loss 0", "141"] and run.stderr == "", run


def test_durations_read_at_a_glance() -> None:
    assert [render.duration(s) for s in (-3, 42.9, 185, 7620)] == ["0s", "42s", "3m05s", "2h07m"]


def test_wait_never_notes_a_reason_that_repeats_the_status() -> None:
    """A note (a standby held) leaves the job RUNNING with the reason `running`: the next poll
    must not print `running: running` under it."""
    screen = io.StringIO()
    watch = render.Watch(render.ProgressBar(screen, columns=80))
    now = datetime.now(UTC)
    job = Job.model_validate(
        {"id": "j", "team": "t", "name": "first-run", "status": "RUNNING",
         "status_reason": "running", "spec": load_spec(FIRST_RUN).model_dump(),
         "created_at": now, "updated_at": now, "attempts": 1}
    )  # fmt: skip
    held = "standby on spot aws:ape1-az3:g4dn.xlarge:T4x1 at $0.09/h beside attempt 1"
    note = JobEvent(id=3, job_id="j", at=now, from_status=JobStatus.RUNNING,
                    to_status=JobStatus.RUNNING, reason=held, data={"attempt": 1})  # fmt: skip
    watch.update(job, [note])
    watch.update(job, [note])
    shown = screen.getvalue()
    assert held.split(" at ")[0] in shown
    assert "running: running" not in shown, shown


def test_an_error_fits_80_columns_and_an_ended_job_waits_for_nothing(
    env: dict[str, str], api: LiveApi, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    with Client() as gj:
        job = gj.submit(GPT_SMALL)
    api.finish_with_log(job.id, "done\n")
    monkeypatch.setenv("COLUMNS", "80")
    code, _ = gpujobs("cancel", job.id)
    said = capsys.readouterr().err
    assert code == 6 and said.startswith("error: ") and "SUCCEEDED" in said
    assert max(len(line) for line in said.splitlines()) <= 80, said
    # After Ctrl-C stopped the wait, or a cancel: the bar's last line has no "0s" of waiting.
    screen = io.StringIO()
    with Client() as gj:
        ended = gj.get(job.id).model_copy(
            update={"status": JobStatus.CANCELLED, "status_reason": "cancelled by user"}
        )
    render.ProgressBar(screen, columns=80).update(ended, since=datetime.now(UTC))
    assert screen.getvalue().split()[:2] != ["CANCELLED", "0s"], screen.getvalue()
    assert "cancelled by user" in screen.getvalue()


def test_estimate_at_80_columns_keeps_the_instance_and_breaks_names_between_words(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out = gpujobs("estimate", GPT_SMALL)
    assert code == 0
    lines = out.splitlines()
    header = lines[0]
    assert "INSTANCE" in header.split()  # without it two plans in a zone read as one row
    where, instance = header.index("WHERE"), header.index("INSTANCE")
    continued = 0
    for above, line in zip(lines[1:], lines[2:], strict=False):
        if line[:where].strip() or len(line) <= where or line[where] == " ":
            continue  # a plan's row, or its reason under it
        continued += 1
        cut = above[where:instance].rstrip()
        assert cut.endswith(("/", "-")), (above, line)  # never mid-word
    assert continued, out  # the test's catalog has names wider than the column


TRANSCRIPT = EXAMPLES.parent / "docs" / "transcripts" / "80-columns.txt"


def test_the_80_column_transcript_fits_and_reads_clean() -> None:
    """docs/transcripts/80-columns.txt, from scripts/transcript_80_columns.py: what a newcomer
    sees of the first job in an 80-column terminal."""
    text = TRANSCRIPT.read_text()
    lines = text.splitlines()
    for command in ("submit", "show", "events", "logs", "estimate"):
        assert any(line.startswith(f"$ gpujobs {command} ") for line in lines), command
    assert max(len(line) for line in lines) <= 80
    for never in ("None", "running: running", "handed_over", "CANCELLED 0s"):
        assert never not in text, never
    steps = [line for line in lines if line[19:].startswith("  step ")]
    assert steps and len(steps) == len(set(steps))  # no step line twice
    assert (
        sum("P(meet deadline)" in line for line in lines[: lines.index("$ gpujobs show first-run")])
        == 1
    )
